import Foundation
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension EndToEnd {
    /// What an operator sees when a service cannot start: the reason on stderr, naming the
    /// variable, and exit status 1 at once — not a trap ("Fatal error: Error raised at top level"),
    /// which took seconds to die (the runtime's backtrace) and exited with a signal.
    @Suite("End to end: a service that cannot start", .timeLimit(.minutes(2)))
    struct StartupTests {
        struct Exit {
            var status: Int32
            var reason: Process.TerminationReason
            var output: String
        }

        /// Runs an executable with only `environment` (and PATH) until it exits, at most `within`.
        static func run(_ executable: String, environment: [String: String], within: Duration = .seconds(20)) async throws -> Exit {
            let process = Process()
            process.executableURL = Stack.binDirectory.appendingPathComponent(executable)
            process.environment = environment.merging(["PATH": ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"]) { $1 }
            let output = FileManager.default.temporaryDirectory.appendingPathComponent("islet-startup-\(executable)-\(UUID().uuidString).log")
            FileManager.default.createFile(atPath: output.path, contents: nil)
            defer { try? FileManager.default.removeItem(at: output) }
            let handle = try FileHandle(forWritingTo: output)
            process.standardOutput = handle
            process.standardError = handle
            try process.run()
            let deadline = ContinuousClock.now + within
            while process.isRunning {
                if ContinuousClock.now > deadline {
                    process.terminate()
                    process.waitUntilExit()
                    throw E2EFailure("\(executable) was still running after \(within)")
                }
                try await Task.sleep(for: .milliseconds(20))
            }
            try handle.close()
            return Exit(status: process.terminationStatus, reason: process.terminationReason, output: try String(contentsOf: output, encoding: .utf8))
        }

        static let services = ["token-registry", "content-service", "apns-dispatcher", "analytics-ingest", "analytics-consumer"]

        @Test("without ISLET_KAFKA_BOOTSTRAP: exit 1, the variable named", arguments: services)
        func missingBootstrap(service: String) async throws {
            let exit = try await Self.run(service, environment: [:], within: .seconds(30))
            #expect(exit.reason == .exit && exit.status == 1, "\(exit.output)")
            #expect(exit.output.contains("ISLET_KAFKA_BOOTSTRAP is required"))
            #expect(!exit.output.contains("Fatal error"))
        }

        @Test(
            "the service's own required setting missing: exit 1, the setting named",
            arguments: [
                ("token-registry", "ISLET_AUTH_HS256_KEYS"), ("content-service", "ISLET_LINK_KEYS"), ("apns-dispatcher", "ISLET_APNS_KEYS"),
                ("analytics-ingest", "ISLET_LINK_KEYS"),
            ])
        func missingSetting(service: String, variable: String) async throws {
            let exit = try await Self.run(service, environment: ["ISLET_KAFKA_BOOTSTRAP": "127.0.0.1:1", "ISLET_HTTP_PORT": "0"], within: .seconds(30))
            #expect(exit.reason == .exit && exit.status == 1, "\(exit.output)")
            #expect(exit.output.contains("\(service) cannot start"))
            #expect(exit.output.contains(variable))
            #expect(!exit.output.contains("Fatal error"))
        }

        @Test("its HTTP port taken: exit 1, the address, the variables and the cause printed")
        func portTaken() async throws {
            let socket = try BoundSocket()
            let exit = try await Self.run(
                "analytics-consumer", environment: ["ISLET_KAFKA_BOOTSTRAP": "127.0.0.1:1", "ISLET_HTTP_HOST": "127.0.0.1", "ISLET_HTTP_PORT": "\(socket.port)"])
            withExtendedLifetime(socket) {}
            #expect(exit.reason == .exit && exit.status == 1, "\(exit.output)")
            #expect(
                exit.output.contains(
                    "analytics-consumer cannot listen on 127.0.0.1:\(socket.port) (http: ISLET_HTTP_HOST, ISLET_HTTP_PORT): the port is in use by another process"),
                "\(exit.output)")
            #expect(!exit.output.contains("Fatal error"))
        }

        @Test("apns-simulator without its keys: exit 1")
        func simulatorWithoutKeys() async throws {
            let exit = try await Self.run("apns-simulator", environment: [:], within: .seconds(30))
            #expect(exit.reason == .exit && exit.status == 1, "\(exit.output)")
            #expect(!exit.output.contains("Fatal error"))
        }
    }
}

/// A loopback TCP port held (bound and listening) until this is released.
final class BoundSocket {
    let descriptor: Int32
    let port: Int

    init() throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw E2EFailure("socket() failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0, listen(fd, 1) == 0 else {
            close(fd)
            throw E2EFailure("could not bind a loopback port")
        }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        descriptor = fd
        port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(descriptor) }
}
