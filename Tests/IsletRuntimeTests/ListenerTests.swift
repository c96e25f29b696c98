import Hummingbird
import IsletRuntime
import IsletTesting
import Logging
import ServiceLifecycle
import Testing

@Suite("A listener that cannot bind")
struct ListenerTests {
    @Test("an HTTP port in use stops the server with the address, the variables and the reason")
    func httpPortInUse() async throws {
        let taken = try TakenPort()
        defer { taken.close() }
        let settings = try ServiceSettings(
            from: .variables(["ISLET_KAFKA_BOOTSTRAP": "k:1", "ISLET_HTTP_HOST": "127.0.0.1", "ISLET_HTTP_PORT": "\(taken.port)"]),
            serviceName: "s", defaultHTTPPort: 0)
        let runtime = ServiceRuntime(settings: settings, logger: Logger(label: "test"))
        let error = await #expect(throws: ListenerBindError.self) {
            try await runtime.httpServer(router: runtime.makeRouter().buildResponder()).run()
        }
        #expect(error?.port == taken.port)
        #expect(error?.variables == ["ISLET_HTTP_HOST", "ISLET_HTTP_PORT"])
        #expect(
            error?.description
                == "cannot listen on 127.0.0.1:\(taken.port) (http: ISLET_HTTP_HOST, ISLET_HTTP_PORT): the port is in use by another process (`ss -ltnp 'sport = :\(taken.port)'` names it)"
        )
    }

    @Test("the operator listener names its own variables")
    func operatorPortInUse() async throws {
        let taken = try TakenPort()
        defer { taken.close() }
        let settings = try ServiceSettings(
            from: .variables(["ISLET_KAFKA_BOOTSTRAP": "k:1", "ISLET_OPERATOR_HOST": "127.0.0.1", "ISLET_OPERATOR_PORT": "\(taken.port)"]),
            serviceName: "s", defaultHTTPPort: 0)
        let runtime = ServiceRuntime(settings: settings, logger: Logger(label: "test"))
        let error = await #expect(throws: ListenerBindError.self) {
            try await runtime.operatorServer(router: runtime.makeRouter().buildResponder()).run()
        }
        #expect(error?.listener == "operator")
        #expect(error?.variables == ["ISLET_OPERATOR_HOST", "ISLET_OPERATOR_PORT"])
    }

    // (A host name that does not resolve is reported too; not tried here: it would wait for DNS.)
    @Test("an address no interface of the machine has")
    func addressNotHere() async throws {
        for (host, reason) in [("192.0.2.1", "no network interface of this machine has that address")] {
            let settings = try ServiceSettings(
                from: .variables(["ISLET_KAFKA_BOOTSTRAP": "k:1", "ISLET_HTTP_HOST": host, "ISLET_HTTP_PORT": "18999"]),
                serviceName: "s", defaultHTTPPort: 0)
            let runtime = ServiceRuntime(settings: settings, logger: Logger(label: "test"))
            let error = await #expect(throws: ListenerBindError.self) {
                try await runtime.httpServer(router: runtime.makeRouter().buildResponder()).run()
            }
            #expect(error?.reason == reason)
        }
    }

    @Test("any other error passes unchanged")
    func otherErrors() async throws {
        struct Failing: Service {
            struct Boom: Error {}
            func run() async throws { throw Boom() }
        }
        await #expect(throws: Failing.Boom.self) {
            try await Listener(Failing(), name: "http", host: "127.0.0.1", port: 1, variables: []).run()
        }
    }
}
