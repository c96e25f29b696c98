import APNsSimulator
import AsyncHTTPClient
import Crypto
import Foundation
import IsletKafka
import IsletMessages
import IsletRuntime
import JWTKit
import NIOCore
import NIOHTTP1
import Synchronization
import Testing
import TokenRegistry

#if canImport(Glibc)
    import Glibc
#endif

/// The end-to-end suites run only when scripts/test.sh asks for them (`ISLET_E2E=1`, with the built
/// executables in `ISLET_BIN_DIR`); each starts a broker of its own (``SuiteBroker``).
let endToEndEnabled = ProcessInfo.processInfo.environment["ISLET_E2E"] == "1"

/// Every end-to-end suite is nested here: they run one after the other, never side by side (each
/// starts the whole product and its broker; two at once would share two cores).
@Suite("End to end", .enabled(if: endToEndEnabled), .serialized)
enum EndToEnd {}

struct E2EFailure: Error, CustomStringConvertible {
    var description: String
    /// The HTTP status that failed the call, when one did.
    var status: Int?
    init(_ description: String, status: Int? = nil) {
        self.description = description
        self.status = status
    }
}

/// One of the product's executables, run as a child process with its own log file.
final class ServiceProcess: @unchecked Sendable {  // its mutable state is under `lock`
    enum Name: String, CaseIterable, Sendable {
        case simulator = "apns-simulator"
        case registry = "token-registry"
        case content = "content-service"
        case dispatcher = "apns-dispatcher"
        case ingest = "analytics-ingest"
    }

    let name: Name
    let logDirectory: URL
    private let lock = NSLock()
    private var process: Process?
    private var starts = 0
    private var settings: [String: String]
    /// The ports its listeners bound in the last start (``ListenerReport``: `http`, `grpc`, …).
    private var listeners: [String: Int] = [:]

    /// Names the log files of a second instance of the same service ("content-service-b-1.log").
    let instance: String?

    init(name: Name, environment: [String: String], logDirectory: URL, instance: String? = nil) {
        self.name = name
        self.instance = instance
        self.settings = environment
        self.logDirectory = logDirectory
    }

    /// Its environment (the ports in it are 0: it binds what the kernel gives it and reports it).
    var environment: [String: String] { lock.withLock { settings } }

    /// Sets a variable for the next start.
    func set(_ key: String, _ value: String) { lock.withLock { settings[key] = value } }

    /// The port its listener `listener` bound in the last start (`http`: /health, the API).
    func port(_ listener: String = "http") -> Int? { lock.withLock { listeners[listener] } }

    var healthURL: String { "http://127.0.0.1:\(port() ?? 0)" }

    var pid: Int32? { lock.withLock { process.map(\.processIdentifier) } }
    var isRunning: Bool { lock.withLock { process?.isRunning ?? false } }

    /// Every log file this service wrote in the run (one per start).
    var logFiles: [URL] { (1...max(1, lock.withLock { starts })).map { logDirectory.appendingPathComponent("\(logName)-\($0).log") } }

    private var logName: String { instance.map { "\(name.rawValue)-\($0)" } ?? name.rawValue }
    /// Its name and instance, for messages.
    var label: String { logName }

    /// The listeners it reports once bound.
    private var expectedListeners: Set<String> {
        var names: Set<String> = ["http"]
        if settings["ISLET_GRPC_PORT"] != nil { names.insert("grpc") }
        if settings["ISLET_OPERATOR_PORT"] != nil { names.insert("operator") }
        if name == .simulator { names.insert("apns") }
        return names
    }

    /// Starts the executable, learns the ports it bound, and waits until its `/health` answers
    /// 200 (ready), at most `timeout`.
    func start(timeout: Duration = .seconds(120)) async throws {
        // Without it the dispatcher would push to Apple's hosts: the simulator reports its port first.
        if name == .dispatcher && environment["ISLET_APNS_URL"] == nil { throw E2EFailure("the dispatcher has no ISLET_APNS_URL: start the simulator first") }
        let process = Process()
        process.executableURL = Stack.binDirectory.appendingPathComponent(name.rawValue)
        let (number, reportFile, expected) = lock.withLock { () -> (Int, URL, Set<String>) in
            starts += 1
            listeners = [:]
            return (starts, logDirectory.appendingPathComponent("\(logName)-\(starts).listeners"), expectedListeners)
        }
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("ISLET_") }
            .merging(environment) { $1 }.merging(["ISLET_LISTENERS_FILE": reportFile.path]) { $1 }
        let log = logDirectory.appendingPathComponent("\(logName)-\(number).log")
        FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        lock.withLock { self.process = process }
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            guard process.isRunning else { throw E2EFailure("\(name.rawValue) exited during start-up (status \(process.terminationStatus)); see \(log.path)") }
            let bound = ListenerReport.read(reportFile.path)
            if expected.isSubset(of: bound.keys) {
                lock.withLock { listeners = bound }
                if await HTTP.status(healthURL + "/health") == 200 { return }
            }
            try await Task.sleep(for: .milliseconds(100))
        }
        throw E2EFailure("\(name.rawValue) was not ready within \(timeout); see \(log.path)")
    }

    /// `kill -9`: no chance to flush, commit or answer.
    func kill9() async {
        guard let process = lock.withLock({ process }), process.isRunning else { return }
        _ = kill(process.processIdentifier, SIGKILL)
        _ = await waitForExit(process, within: .seconds(10))
    }

    /// SIGTERM, then waits for the exit; returns how long it took and the exit status (`nil`: it
    /// did not exit within `within`, and was killed).
    func terminate(within: Duration = .seconds(20)) async -> (Duration, Int32?) {
        guard let process = lock.withLock({ process }), process.isRunning else { return (.zero, 0) }
        let started = ContinuousClock.now
        process.terminate()
        let exited = await waitForExit(process, within: within)
        let took = ContinuousClock.now - started
        if !exited {
            _ = kill(process.processIdentifier, SIGKILL)
            _ = await waitForExit(process, within: .seconds(10))
            return (took, nil)
        }
        return (took, process.terminationStatus)
    }

    private func waitForExit(_ process: Process, within: Duration) async -> Bool {
        let deadline = ContinuousClock.now + within
        while process.isRunning {
            if ContinuousClock.now > deadline { return false }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return true
    }
}

/// The whole product as processes: the APNs simulator, token-registry, content-service,
/// apns-dispatcher and analytics-ingest, each on the loopback ports it bound (port 0, reported in
/// `ISLET_LISTENERS_FILE`), against a broker of the stack's own.
final class Stack: Sendable {
    static var binDirectory: URL {
        if let directory = ProcessInfo.processInfo.environment["ISLET_BIN_DIR"] { return URL(fileURLWithPath: directory) }
        return repository.appendingPathComponent(".build/debug")
    }

    static let repository = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// The broker the test brought, if any.
    private let suppliedBroker: String?
    /// The broker ``start()`` started for the stack (none when the test brought one).
    private let ownBroker = Mutex<SuiteBroker?>(nil)
    /// Where the services and the test's clients find Kafka (once ``start()`` began).
    var bootstrap: String { suppliedBroker ?? ownBroker.withLock { $0?.bootstrap } ?? "" }
    /// The stack's own broker's process id, for the broker-fault suite's SIGSTOP.
    var brokerPID: pid_t? { ownBroker.withLock { $0?.pid } }
    /// Whether ``start()`` creates the Islet topics (not on a broker the test brought).
    let createsTopics: Bool
    let directory: URL
    let teamID = Stack.teamID
    static let teamID = "E2ETEAM001"
    let keyID = "E2EKEY0001"
    let jwtKey = (kid: "e2e", secret: Stack.randomHex(32))
    let linkKey = (kid: "e2e", secret: Stack.randomHex(32))
    /// The backend key the gRPC APIs take (read and write).
    let backendKey = Stack.randomHex(32)
    /// The key backends sign activity tickets with (token-registry verifies them).
    let ticketKey = (kid: "e2e-orders", secret: Stack.randomHex(32))
    /// The HTTP ports the services bound in their last start.
    var ports: [ServiceProcess.Name: Int] { listenerPorts("http") }
    /// The operator listeners (/metrics) of the services whose HTTP port faces phones.
    var operatorPorts: [ServiceProcess.Name: Int] { listenerPorts("operator") }
    var grpcPorts: [ServiceProcess.Name: Int] { listenerPorts("grpc") }
    var simulatorPort: Int? { self[.simulator].port("apns") }

    private func listenerPorts(_ listener: String) -> [ServiceProcess.Name: Int] {
        services.compactMapValues { $0.port(listener) }
    }
    let services: [ServiceProcess.Name: ServiceProcess]

    /// - Parameters:
    ///   - name: the test's name, for the log directory.
    ///   - extra: more environment per service (budgets, timeouts).
    ///   - broker: a broker of the test's own that already has every Islet topic (librdkafka's mock
    ///     cluster, which cannot create topics on request); when `nil`, the stack starts tansu for
    ///     itself (``SuiteBroker``), stopped by ``stop()``.
    init(name: String, extra: [ServiceProcess.Name: [String: String]] = [:], broker: String? = nil) throws {
        let runDirectory = ProcessInfo.processInfo.environment["ISLET_RUN_DIR"].map { URL(fileURLWithPath: $0) }
            ?? Self.repository.appendingPathComponent(".islet-run")
        directory = runDirectory.appendingPathComponent("e2e").appendingPathComponent(name)
        try? FileManager.default.removeItem(at: directory)
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        suppliedBroker = broker
        createsTopics = broker == nil

        let keyFile = directory.appendingPathComponent("AuthKey.p8")
        try P256.Signing.PrivateKey().pemRepresentation.write(to: keyFile, atomically: true, encoding: .utf8)
        let certificate = directory.appendingPathComponent("simulator.pem")
        // ISLET_KAFKA_BOOTSTRAP: the broker's, set by ``start()`` when the stack starts its own.
        var common = ["ISLET_HTTP_HOST": "127.0.0.1", "ISLET_LOG_LEVEL": ProcessInfo.processInfo.environment["ISLET_E2E_LOG_LEVEL"] ?? "info"]
        if let broker { common["ISLET_KAFKA_BOOTSTRAP"] = broker }
        var environments: [ServiceProcess.Name: [String: String]] = [
            .simulator: [
                "ISLET_SIMULATOR_KEYS": "\(keyID)=\(teamID):\(keyFile.path)", "ISLET_SIMULATOR_PORT": "0",
                "ISLET_SIMULATOR_TLS_CERTIFICATE_OUT": certificate.path,
            ],
            .registry: [
                "ISLET_GRPC_PORT": "0", "ISLET_AUTH_HS256_KEYS": "\(jwtKey.kid)=\(jwtKey.secret)",
                "ISLET_GRPC_KEYS": "e2e-backend=\(backendKey):read+write",
                "ISLET_TICKET_HS256_KEYS": "\(ticketKey.kid)=\(ticketKey.secret)",
                // ISLET_CONTENT_HTTP: set once content-service reported its port (``start()``).
                "ISLET_CONTENT_HTTP_KEY": backendKey,
                "ISLET_APPS": Driver.apps.values.sorted().joined(separator: ","),
                // The load runs register thousands of activities for one user.
                "ISLET_QUOTA_LIVE_ACTIVITIES": "0", "ISLET_QUOTA_PUSH_TO_START": "0", "ISLET_QUOTA_DEVICES_PER_ACTIVITY": "5",
            ],
            .content: [
                "ISLET_GRPC_PORT": "0", "ISLET_LINK_KEYS": "\(linkKey.kid)=\(linkKey.secret)",
                "ISLET_GRPC_KEYS": "e2e-backend=\(backendKey):read+write",
            ],
            .dispatcher: [
                "ISLET_APNS_KEYS": "\(teamID)=\(keyID):\(keyFile.path)",
                "ISLET_APNS_APPS": Driver.apps.values.sorted().map { "\($0)=" + Stack.teamID }.joined(separator: ","),
                // ISLET_APNS_URL: set once the simulator reported its port (``start()``).
                "ISLET_APNS_CA_FILE": certificate.path,
                // A broadcast channel goes 2 s after its match ended (4 hours in production).
                "ISLET_DISPATCHER_CHANNEL_DELETION_DELAY_MS": "2000",
            ],
            .ingest: ["ISLET_LINK_KEYS": "\(linkKey.kid)=\(linkKey.secret)"],
        ]
        var services: [ServiceProcess.Name: ServiceProcess] = [:]
        for name in ServiceProcess.Name.allCases {
            environments[name, default: [:]].merge(common) { a, _ in a }
            // Port 0 everywhere: each listener binds what the kernel gives it and reports it (ListenerReport).
            environments[name]!["ISLET_HTTP_PORT"] = "0"
            if [.registry, .ingest, .content].contains(name) { environments[name]!["ISLET_OPERATOR_PORT"] = "0" }
            environments[name]!.merge(extra[name] ?? [:]) { $1 }
            services[name] = ServiceProcess(name: name, environment: environments[name]!, logDirectory: directory)
        }
        self.services = services
    }

    subscript(_ name: ServiceProcess.Name) -> ServiceProcess { services[name]! }

    /// Another instance of a service: the same configuration (the same consumer group), ports of
    /// its own, log files named after `instance`. Not started, and not stopped by ``stop()``.
    func another(_ name: ServiceProcess.Name, instance: String) -> ServiceProcess {
        let process = ServiceProcess(name: name, environment: self[name].environment, logDirectory: directory, instance: instance)
        if name == .dispatcher, let simulatorPort { process.set("ISLET_APNS_URL", "https://127.0.0.1:\(simulatorPort)") }
        extraInstances.withLock { $0.append(process) }
        return process
    }

    func url(_ name: ServiceProcess.Name) -> String { self[name].healthURL }

    /// Starts the simulator first (the dispatcher needs its certificate), then the services.
    /// Starts the stack, runs `body` with a driver, records what it throws as the test's failure,
    /// then closes the driver and stops every process (also after a failure).
    func run(_ body: (Driver) async throws -> Void) async throws {
        try await start()
        let driver = try Driver(stack: self)
        do {
            try await body(driver)
        } catch {
            Issue.record(error)
        }
        await driver.close()
        await stop()
    }

    func start() async throws {
        if suppliedBroker == nil && ownBroker.withLock({ $0 == nil }) {
            let broker = try await SuiteBroker.start(in: directory.appendingPathComponent("broker"))
            ownBroker.withLock { $0 = broker }
            for service in services.values { service.set("ISLET_KAFKA_BOOTSTRAP", broker.bootstrap) }
        }
        if createsTopics {
            let admin = try KafkaAdmin(configuration: .init(bootstrapServers: bootstrap), logger: e2eLogger)
            try await admin.createIsletTopics(partitions: 3)
        }
        try await self[.simulator].start()
        guard let simulatorPort else { throw E2EFailure("the simulator reported no APNs port") }
        self[.dispatcher].set("ISLET_APNS_URL", "https://127.0.0.1:\(simulatorPort)")
        try await withThrowingTaskGroup(of: Void.self) { group in
            for name in [ServiceProcess.Name.content, .dispatcher, .ingest] {
                group.addTask { try await self[name].start() }
            }
            // token-registry reads an announced activity's content from content-service's HTTP API:
            // it starts once that has bound its port.
            group.addTask {
                let deadline = ContinuousClock.now + .seconds(120)
                while self[.content].port("http") == nil, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(50)) }
                guard let port = self[.content].port("http") else { throw E2EFailure("content-service reported no HTTP port") }
                self[.registry].set("ISLET_CONTENT_HTTP", "127.0.0.1:\(port)")
                try await self[.registry].start()
            }
            try await group.waitForAll()
        }
    }

    /// Stops everything (SIGTERM, then SIGKILL for what does not stop), the stack's broker last.
    func stop() async {
        for name in [ServiceProcess.Name.ingest, .registry, .content, .dispatcher, .simulator] {
            _ = await self[name].terminate(within: .seconds(15))
        }
        ownBroker.withLock { $0 }?.stop()
    }

    /// Every log line of every service in the run.
    func logLines() -> [(service: String, line: String)] {
        services.values.flatMap { service in
            service.logFiles.flatMap { file -> [(String, String)] in
                guard let text = try? String(contentsOf: file, encoding: .utf8) else { return [] }
                return text.split(separator: "\n").map { (file.lastPathComponent, String($0)) }
            }
        }
    }

    // MARK: Clients

    /// A bearer JWT for token-registry's HTTP API, for `user`, valid for `lifetime` from now (or
    /// from `notBefore` seconds from now, when given).
    func jwt(user: String, lifetime: TimeInterval = 3_600, notBefore: TimeInterval? = nil) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: jwtKey.secret), digestAlgorithm: .sha256, kid: JWKIdentifier(string: jwtKey.kid))
        let start = Date().addingTimeInterval(notBefore ?? 0)
        return try await keys.sign(
            UserClaims(sub: .init(value: user), exp: .init(value: start.addingTimeInterval(lifetime)), nbf: notBefore.map { _ in .init(value: start) }),
            kid: JWKIdentifier(string: jwtKey.kid))
    }

    /// An activity ticket, as the activity's backend would sign it: `user` owns `activity` of `bundleId`.
    func ticket(user: String, activity: String, bundleId: String) async throws -> String {
        let keys = JWTKeyCollection()
        await keys.add(hmac: HMACKey(from: ticketKey.secret), digestAlgorithm: .sha256, kid: JWKIdentifier(string: ticketKey.kid))
        return try await keys.sign(
            ActivityTickets.Claims(user: user, activityId: activity, bundleId: bundleId, expires: Date().addingTimeInterval(600)),
            kid: JWKIdentifier(string: ticketKey.kid))
    }

    /// What the simulator accepted (oldest first), to `token` only when given.
    func received(token: String? = nil, payloads: Bool = true) async throws -> [AcceptedNotification] {
        var query = payloads ? "" : "payload=false"
        if let token { query += (query.isEmpty ? "" : "&") + "token=\(token)" }
        let (status, body) = try await HTTP.request("\(url(.simulator))/admin/notifications?\(query)")
        guard status == 200 else { throw E2EFailure("the simulator answered \(status)") }
        return try IsletJSON.decodeValue([AcceptedNotification].self, from: body)
    }

    /// The broadcasts the simulator accepted on `channel`, oldest first.
    func broadcasts(channel: String) async throws -> [AcceptedBroadcast] {
        let query = channel.addingPercentEncoding(withAllowedCharacters: .alphanumerics) ?? channel
        let (status, body) = try await HTTP.request("\(url(.simulator))/admin/broadcasts?channel=\(query)")
        guard status == 200 else { throw E2EFailure("the simulator answered \(status)") }
        return try IsletJSON.decodeValue([AcceptedBroadcast].self, from: body)
    }

    /// The simulator's broadcast channels of `bundleId`.
    func channels(bundleId: String) async throws -> [SimulatedChannel] {
        let (status, body) = try await HTTP.request("\(url(.simulator))/admin/channels?bundleId=\(bundleId)")
        guard status == 200 else { throw E2EFailure("the simulator answered \(status)") }
        return try IsletJSON.decodeValue([SimulatedChannel].self, from: body)
    }

    /// `count` simulated phones start the activity on the channel.
    func subscribe(_ count: Int, to channel: String, bundleId: String) async throws {
        let body: JSONValue = ["bundleId": .string(bundleId), "channelId": .string(channel), "count": .integer(Int64(count))]
        let (status, answer) = try await HTTP.request("\(url(.simulator))/admin/subscribers", method: .POST, body: body.jsonBytes)
        guard status == 200 else { throw E2EFailure("the simulator refused the subscribers: \(status) \(String(decoding: answer, as: UTF8.self))") }
    }

    func inject(_ fault: Fault) async throws {
        let (status, body) = try await HTTP.request("\(url(.simulator))/admin/faults", method: .POST, body: try IsletJSON.encode(fault))
        guard status == 201 else { throw E2EFailure("the simulator refused the fault: \(status) \(String(decoding: body, as: UTF8.self))") }
    }

    /// Waits until the simulator accepted `count` more pushes than now, or than `since` (its
    /// `accepted` count read before the events were published: a fast pipeline delivers the first
    /// before this is called).
    /// Returns early once `publishing` is lowered (the backend sent everything: fewer pushes may
    /// come) and the pushes have stopped coming for a few seconds.
    func waitForPushes(_ count: Int, within timeout: Duration, since: Int? = nil, publishing: Flag? = nil) async throws {
        let start: Int
        if let since { start = since } else { start = try await simulatorStats().accepted }
        let deadline = ContinuousClock.now + timeout
        var last = start
        var quietSince = ContinuousClock.now
        while case let accepted = try await simulatorStats().accepted, accepted < start + count {
            if accepted != last { (last, quietSince) = (accepted, ContinuousClock.now) }
            if let publishing, !publishing.isRaised, ContinuousClock.now - quietSince > .seconds(5) { return }
            guard ContinuousClock.now < deadline else {
                throw E2EFailure("fewer than \(count) pushes in \(timeout) (\(accepted - start) came): the pipeline is not flowing; \(await flowDigest())")
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }

    /// Where the flow stopped, for a failure's message: each running process's counters of events,
    /// requests, sends and consumer lag (from its /metrics), the extra instances a test started included.
    func flowDigest(also others: [ServiceProcess] = []) async -> String {
        let counters = [
            "islet_content_events_in_total", "islet_content_events_total", "islet_content_requests_total", "islet_dispatcher_requests_total",
            "islet_dispatcher_sends_total", "islet_kafka_consumer_messages_total", "islet_kafka_consumer_lag_records",
        ]
        var lines: [String] = []
        for process in [.registry, .content, .dispatcher].map({ self[$0] }) + others + extraInstances.withLock({ $0 }) where process.isRunning {
            let base = process.port("operator").map { "http://127.0.0.1:\($0)" } ?? process.healthURL
            guard let (status, body) = try? await HTTP.request("\(base)/metrics", timeout: .seconds(5)), status == 200 else {
                lines.append("\(process.label): /metrics did not answer")
                continue
            }
            var sums: [String: Double] = [:]
            for line in String(decoding: body, as: UTF8.self).split(separator: "\n") where !line.hasPrefix("#") {
                var name = String(line.prefix { $0 != "{" && $0 != " " })
                // Outcomes by result: where a push ended matters.
                if name == "islet_dispatcher_outcomes_total", let result = line.firstRange(of: "result=\"").map({ line[$0.upperBound...].prefix { $0 != "\"" } }) {
                    name += "{\(result)}"
                    sums[name, default: 0] += line.split(separator: " ").last.flatMap { Double($0) } ?? 0
                    continue
                }
                guard counters.contains(name), let value = line.split(separator: " ").last.flatMap({ Double($0) }) else { continue }
                sums[name, default: 0] += value
            }
            lines.append("\(process.label): " + sums.sorted { $0.key < $1.key }.map { "\($0.key.replacingOccurrences(of: "islet_", with: "")) \(Int($0.value))" }.joined(separator: ", "))
        }
        if let stats = try? await simulatorStats() {
            lines.append("apns-simulator: accepted \(stats.accepted), rejected \(stats.rejected), connections \(stats.connections), resets \(stats.resets)")
        }
        return lines.joined(separator: "; ")
    }

    /// Instances a test started besides the stack's own (``another(_:instance:)``): the failure digest reads them too.
    let extraInstances = Mutex<[ServiceProcess]>([])

    func simulatorStats() async throws -> SimulatorStats {
        let (_, body) = try await HTTP.request("\(url(.simulator))/admin/stats")
        return try IsletJSON.decodeValue(SimulatorStats.self, from: body)
    }

    /// A Prometheus counter's value summed over its label sets (0 when absent).
    func metric(_ service: ServiceProcess.Name, _ name: String, matching labels: String = "") async throws -> Double {
        let base = operatorPorts[service].map { "http://127.0.0.1:\($0)" } ?? url(service)
        let (_, body) = try await HTTP.request("\(base)/metrics")
        return String(decoding: body, as: UTF8.self).split(separator: "\n").filter { line in
            !line.hasPrefix("#") && (line.hasPrefix(name + " ") || line.hasPrefix(name + "{")) && (labels.isEmpty || line.contains(labels))
        }.compactMap { $0.split(separator: " ").last.flatMap { Double($0) } }.reduce(0, +)
    }

    // MARK: Pieces

    static func randomHex(_ bytes: Int) -> String {
        (0..<bytes).map { _ in String(format: "%02x", UInt8.random(in: 0...255)) }.joined()
    }
}

struct UserClaims: JWTPayload {
    var sub: SubjectClaim
    var exp: ExpirationClaim
    var nbf: NotBeforeClaim?
    func verify(using algorithm: some JWTAlgorithm) async throws {}
}

/// Small HTTP helpers over AsyncHTTPClient's shared client.
enum HTTP {
    static func request(
        _ url: String, method: HTTPMethod = .GET, headers: [(String, String)] = [], body: [UInt8]? = nil, timeout: Duration = .seconds(30)
    ) async throws -> (Int, [UInt8]) {
        let (status, _, answer) = try await exchange(url, method: method, headers: headers, body: body, timeout: timeout)
        return (status, answer)
    }

    /// ``request(_:method:headers:body:timeout:)`` with the answer's headers.
    static func exchange(
        _ url: String, method: HTTPMethod = .GET, headers: [(String, String)] = [], body: [UInt8]? = nil, timeout: Duration = .seconds(30)
    ) async throws -> (Int, HTTPHeaders, [UInt8]) {
        var request = HTTPClientRequest(url: url)
        request.method = method
        for (name, value) in headers { request.headers.add(name: name, value: value) }
        if let body {
            request.headers.add(name: "Content-Type", value: "application/json")
            request.body = .bytes(body)
        }
        let response = try await HTTPClient.shared.execute(request, timeout: .init(timeout))
        let buffer = try await response.body.collect(upTo: 256 << 20)
        return (Int(response.status.code), response.headers, Array(buffer: buffer))
    }

    /// The status of a GET, `nil` when nothing answers.
    static func status(_ url: String) async -> Int? {
        try? await request(url, timeout: .seconds(2)).0
    }
}

extension TimeAmount {
    init(_ duration: Duration) {
        let (seconds, attoseconds) = duration.components
        self = .nanoseconds(seconds * 1_000_000_000 + attoseconds / 1_000_000_000)
    }
}

/// A tansu broker for one suite (`scripts/broker.sh`, data in memory, a free loopback port), so that
/// no suite reads what an earlier one wrote: tansu's cost of reading a partition grows faster than
/// the batches it holds (docs/operations.md), and on one broker shared by every suite, content-service
/// in the rebalance run, the ninth, read its events at about 20 a second and missed the run's end.
/// Killed by ``stop()`` or, at the latest, when the stack is released.
final class SuiteBroker: Sendable {
    let bootstrap: String
    let pid: pid_t

    private init(bootstrap: String, pid: pid_t) {
        self.bootstrap = bootstrap
        self.pid = pid
    }

    /// Runs `scripts/broker.sh` (it returns once tansu accepts connections, within 10 s).
    static func start(in directory: URL) async throws -> SuiteBroker {
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let outputFile = directory.appendingPathComponent("broker.sh.out")
        let errorFile = directory.appendingPathComponent("broker.sh.log")
        var environment = ProcessInfo.processInfo.environment
        environment["ISLET_RUN_DIR"] = directory.path
        environment["ISLET_BROKER"] = "tansu"
        environment.removeValue(forKey: "ISLET_BROKER_PORT")
        // posix_spawn and waitpid, not Foundation's Process: the script leaves tansu running in the
        // background, and Process saw the script as running for as long as tansu did. Its output
        // goes to files for the same reason (tansu would hold a pipe open).
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0)
        posix_spawn_file_actions_addopen(&actions, 1, outputFile.path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_addopen(&actions, 2, errorFile.path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        let arguments = ["/bin/bash", Stack.repository.appendingPathComponent("scripts/broker.sh").path]
        let environmentLines = environment.map { "\($0.key)=\($0.value)" }
        var argv: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        var envp: [UnsafeMutablePointer<CChar>?] = environmentLines.map { strdup($0) } + [nil]
        defer {
            for pointer in argv { free(pointer) }
            for pointer in envp { free(pointer) }
        }
        var scriptPID: pid_t = 0
        let spawned = posix_spawn(&scriptPID, "/bin/bash", &actions, nil, &argv, &envp)
        guard spawned == 0 else { throw E2EFailure("scripts/broker.sh could not be started: error \(spawned)") }
        var status: Int32 = 0
        let deadline = ContinuousClock.now + .seconds(30)
        while waitpid(scriptPID, &status, WNOHANG) == 0 {
            guard ContinuousClock.now < deadline else {
                kill(scriptPID, SIGKILL)
                throw E2EFailure("scripts/broker.sh did not finish within 30 s")
            }
            try await Task.sleep(for: .milliseconds(20))
        }
        let exitStatus = (status & 0x7f) == 0 ? (status >> 8) & 0xff : -1
        let printed = (try? String(contentsOf: outputFile, encoding: .utf8)) ?? ""
        let complaint = (try? String(contentsOf: errorFile, encoding: .utf8)) ?? ""
        var values: [String: String] = [:]
        for line in printed.split(separator: "\n") {
            let parts = line.split(separator: "=", maxSplits: 1).map(String.init)
            if parts.count == 2 { values[parts[0]] = parts[1] }
        }
        guard exitStatus == 0, let bootstrap = values["ISLET_KAFKA_BOOTSTRAP"], let pid = values["ISLET_BROKER_PID"].flatMap(pid_t.init) else {
            throw E2EFailure("scripts/broker.sh could not start a broker for the suite (status \(exitStatus)): \(complaint)")
        }
        return SuiteBroker(bootstrap: bootstrap, pid: pid)
    }

    /// Kills it (resumed first: the broker-fault suite may have left it stopped). It keeps nothing
    /// worth a clean shutdown.
    func stop() {
        // Once: a second kill could hit another process that reused the pid.
        guard !stopped.exchange(true, ordering: .relaxed) else { return }
        kill(pid, SIGCONT)
        kill(pid, SIGKILL)
    }

    private let stopped = Atomic<Bool>(false)

    deinit { stop() }
}
