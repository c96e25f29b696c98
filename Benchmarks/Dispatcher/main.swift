// islet-dispatch-bench: the pieces of scripts/bench-dispatcher.sh — a signing key, a provider token
// for h2load, a load of tokens and push requests on the broker, and a paced stream for latency.
import APNsDispatcher
import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import IsletKafka
import IsletMessages
import Logging
import NIOCore
import NIOHTTP1
import NIOSSL
import Synchronization

let benchLogger: Logger = {
    var logger = Logger(label: "islet.dispatch-bench")
    logger.logLevel = .error
    return logger
}()

@main
struct DispatchBench: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "islet-dispatch-bench", abstract: "Load and measure apns-dispatcher.",
        subcommands: [Key.self, ProviderToken.self, Load.self, Paced.self, AHCLoad.self])
}

/// Writes a new P-256 signing key (.p8 PEM).
struct Key: ParsableCommand {
    @Option var out: String
    func run() throws {
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: out, atomically: true, encoding: .utf8)
    }
}

/// Prints a provider token (for h2load's authorization header).
struct ProviderToken: AsyncParsableCommand {
    @Option var key: String
    @Option var keyID: String
    @Option var team: String
    func run() async throws {
        let signing = try APNsSigningKey(keyID: keyID, teamID: team, pem: try String(contentsOfFile: key, encoding: .utf8))
        print(try await signing.providerToken(issuedAt: Date()))
    }
}

struct Common: ParsableArguments {
    @Option var bootstrap: String
    @Option var bundle = "com.example.bench"
    @Option(help: "Activities the requests are spread over.") var activities = 2_000
    @Option(help: "Payload size in bytes.") var size = 1_024
    @Option(help: "Share of requests with an alert (each announced on the outcomes topic before it is sent), 0 to 1.") var alerting = 0.0
}

func token(_ i: Int) -> String {
    (0..<80).map { j in String(format: "%02x", (i &* 131 &+ j &* 7 &+ 1) & 0xFF) }.joined()
}

func payload(sequence: Int, size: Int) -> String {
    let head = #"{"aps":{"event":"update","timestamp":\#(1_795_000_000 + sequence),"content-state":{"sequence":\#(sequence),"pad":""#
    let tail = #""}}}"#
    return head + String(repeating: "x", count: max(0, size - head.utf8.count - tail.utf8.count)) + tail
}

func request(_ i: Int, activities: Int, bundle: String, size: Int, alerting share: Double = 0, createdAt: Date = Date()) -> PushRequest {
    let alerting = Double(i % 1_000) < share * 1_000
    var body = payload(sequence: i, size: size)
    if alerting { body = body.replacingOccurrences(of: #"{"aps":{"#, with: #"{"aps":{"alert":{"title":"Bench"},"#) }
    return PushRequest(
        requestId: UUID().uuidString.lowercased(), activityId: "bench-\(i % activities)", event: .update,
        app: AppTarget(bundleId: bundle, environment: .production), attributesType: "BenchAttributes", payload: body,
        priority: 5, urgency: .routine, supersedable: false, alerting: alerting, apnsTimestamp: Int64(1_795_000_000 + i), contentSequence: Int64(i),
        createdAt: createdAt)
}

func tokens(_ common: Common, producer: KafkaProducer) async throws {
    let now = Date()
    try await withThrowingTaskGroup(of: Void.self) { group in
        for a in 0..<common.activities {
            group.addTask {
                try await producer.send(
                    TokenRecord(
                        kind: .update, activityId: "bench-\(a)", userId: "bench", token: token(a), app: AppTarget(bundleId: common.bundle, environment: .production),
                        attributesType: "BenchAttributes", frequentUpdatesEnabled: true, appVersion: "1.0", state: .active, activityStartedAt: now,
                        registeredAt: now, updatedAt: now))
            }
        }
        try await group.waitForAll()
    }
}

/// Tokens for every activity, then `count` push requests, as fast as the broker takes them.
struct Load: AsyncParsableCommand {
    @OptionGroup var common: Common
    @Option var count = 50_000

    func run() async throws {
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: common.bootstrap), logger: benchLogger)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            try await tokens(common, producer: producer)
            var sent = 0
            while sent < count {
                let batch = min(2_000, count - sent)
                try await withThrowingTaskGroup(of: Void.self) { senders in
                    for i in sent..<(sent + batch) {
                        let r = request(i, activities: common.activities, bundle: common.bundle, size: common.size, alerting: common.alerting)
                        senders.addTask { try await producer.send(r) }
                    }
                    try await senders.waitForAll()
                }
                sent += batch
            }
            producer.shutdown()
            try await group.waitForAll()
        }
        print(#"{"tokens":\#(common.activities),"requests":\#(count)}"#)
    }
}

/// Requests at a fixed rate; writes `requestId createdAtMilliseconds` lines for the latency join.
struct Paced: AsyncParsableCommand {
    @OptionGroup var common: Common
    @Option var rate = 1_000
    @Option var seconds = 20
    @Option var out: String
    @Flag(help: "Also register the activities' tokens first.") var withTokens = false

    func run() async throws {
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: common.bootstrap), logger: benchLogger)
        var lines: [String] = []
        let acknowledged = AckLog()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await producer.run() }
            if withTokens { try await tokens(common, producer: producer) }
            let clock = ContinuousClock()
            let start = clock.now
            let total = rate * seconds
            for i in 0..<total {
                let due = start + .nanoseconds(Int64(i) * 1_000_000_000 / Int64(rate))
                if due > clock.now { try await clock.sleep(until: due) }
                let now = Date()
                let r = request(i, activities: common.activities, bundle: common.bundle, size: common.size, createdAt: now)
                lines.append("\(r.requestId) \(Int64(now.timeIntervalSince1970 * 1_000_000))")
                let sentAt = clock.now
                try producer.produce(topic: IsletTopics.pushRequests.name, key: Array(r.key!.utf8), value: try IsletJSON.encode(r)) { result in
                    if case .failure(let error) = result { FileHandle.standardError.write(Data("send failed: \(error)\n".utf8)) }
                    acknowledged.record(i, clock.now - sentAt)
                }
            }
            while producer.inFlightCount > 0 { try await Task.sleep(for: .milliseconds(10)) }
            producer.shutdown()
            try await group.waitForAll()
        }
        try (lines.joined(separator: "\n") + "\n").write(toFile: out, atomically: true, encoding: .utf8)
        // How long Kafka took to acknowledge, per second of the run: a slow start shows here.
        let bySecond = Dictionary(grouping: acknowledged.all, by: { $0.0 / rate })
        for second in bySecond.keys.sorted() {
            let delays = bySecond[second]!.map { $0.1 / .milliseconds(1) }.sorted()
            FileHandle.standardError.write(Data("produce ack second \(second): p50 \(Int(delays[delays.count / 2])) ms, max \(Int(delays.last!)) ms\n".utf8))
        }
    }
}

/// Acknowledgement delays by record number.
final class AckLog: Sendable {
    private let entries = Mutex<[(Int, Duration)]>([])
    func record(_ index: Int, _ delay: Duration) { entries.withLock { $0.append((index, delay)) } }
    var all: [(Int, Duration)] { entries.withLock { $0 } }
}

/// AsyncHTTPClient straight to the simulator, for the issue's note: under load AHC 1.37 with
/// swift-nio-http2 1.46 was seen to send RST_STREAM on streams that had already completed, which an
/// HTTP/2 server's rapid-reset guard answers with GOAWAY. Every request has a deadline. Prints the
/// answers and errors; the simulator's /admin/stats tells how many connections it took.
struct AHCLoad: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "ahc")
    @Option var url: String
    @Option(help: "The simulator's certificate (PEM), to trust.") var ca: String
    @Option var key: String
    @Option var keyID: String
    @Option var team: String
    @Option var bundle = "com.example.bench"
    @Option var count = 50_000
    @Option var concurrency = 100
    @Option var size = 1_024

    func run() async throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        tls.trustRoots = .file(ca)
        var configuration = HTTPClient.Configuration(tlsConfiguration: tls)
        configuration.httpVersion = .automatic
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        let signing = try APNsSigningKey(keyID: keyID, teamID: team, pem: try String(contentsOfFile: key, encoding: .utf8))
        let jwt = try await signing.providerToken(issuedAt: Date())
        let body = Array(payload(sequence: 1, size: size).utf8)
        let (url, bundle, count, concurrency) = (self.url, self.bundle, self.count, self.concurrency)
        let started = ContinuousClock.now
        let results = await withTaskGroup(of: [String: Int].self, returning: [String: Int].self) { group in
            for worker in 0..<concurrency {
                group.addTask {
                    await Self.work(
                        client: client, url: url, bundle: bundle, jwt: jwt, body: body, indices: Array(stride(from: worker, to: count, by: concurrency)))
                }
            }
            var all: [String: Int] = [:]
            for await partial in group { all.merge(partial, uniquingKeysWith: +) }
            return all
        }
        let seconds = (ContinuousClock.now - started) / .seconds(1)
        try await client.shutdown()
        let answers = results.sorted { $0.key < $1.key }.map { "\"\($0.key)\": \($0.value)" }.joined(separator: ", ")
        print("{\"seconds\": \(String(format: "%.1f", seconds)), \(answers)}")
    }

    /// One sender: its share of the requests, one after the other.
    static func work(client: HTTPClient, url: String, bundle: String, jwt: String, body: [UInt8], indices: [Int]) async -> [String: Int] {
        var results: [String: Int] = [:]
        for i in indices {
            var request = HTTPClientRequest(url: "\(url)/3/device/\(token(i % 2_000))")
            request.method = .POST
            request.headers.add(name: "authorization", value: "bearer \(jwt)")
            request.headers.add(name: "apns-push-type", value: "liveactivity")
            request.headers.add(name: "apns-topic", value: "\(bundle).push-type.liveactivity")
            request.headers.add(name: "apns-priority", value: "5")
            request.body = .bytes(body)
            do {
                let response = try await client.execute(request, deadline: .now() + .seconds(10))
                _ = try await response.body.collect(upTo: 65_536)
                results["status \(response.status.code)", default: 0] += 1
            } catch {
                results["error \(String(describing: error).prefix(80))", default: 0] += 1
            }
        }
        return results
    }
}
