import APNsSimulator
import ArgumentParser
import AsyncHTTPClient
import ContentService
import Foundation
import IsletDemoKit
import IsletKafka
import IsletMessages
import JWTKit
import NIOCore
import Synchronization

/// Where the running product is, for the benchmarks that drive it (`latency`, `memory`).
struct StackOptions: ParsableArguments {
    @Option var bootstrap: String
    @Option var registry = "http://127.0.0.1:8081"
    @Option var simulator = "http://127.0.0.1:8090"
    @Option(help: "The registry's HS256 key, kid=secret.") var jwtKey: String

    /// A running producer and the demo's world (its registry client and JWT) on top of it.
    func connect() async throws -> (KafkaProducer, Task<Void, any Error>, World) {
        let producer = try KafkaProducer(configuration: .init(bootstrapServers: bootstrap), logger: quiet)
        let producing = Task { try await producer.run() }
        let endpoints = DemoEndpoints(bootstrap: bootstrap, registry: registry, simulator: simulator, jwtKey: jwtKey)
        return (producer, producing, try await World(endpoints: endpoints, producer: producer))
    }
}

/// End-to-end latency: domain events produced at a steady rate to many activities (each gets one
/// every `activities / rate` seconds, so nothing waits for an activity's previous push and nothing is
/// coalesced; routine updates go at priority 5, so no budget holds them back) → the time each push
/// reached the simulator. scripts/bench-e2e.sh runs it against the whole product.
struct Latency: AsyncParsableCommand {
    @OptionGroup var stack: StackOptions
    @Option var rate = 1_000
    @Option var seconds = 30
    @Option var activities = 2_000
    @Option(help: "A process whose CPU time is reported per event, name=pid (repeatable).") var process: [String] = []

    func run() async throws {
        let processes = try ProcessStats.parse(process)
        let (producer, producing, world) = try await stack.connect()
        let run = world.run
        let names = (0..<activities).map { "lat-\(run)-\($0)" }
        let app = AppTarget(bundleId: "com.example.food", environment: .production)
        print("registering \(activities) activities")
        try await world.register(names, app: app)
        @Sendable func event(_ index: Int) -> ActivityEvent {
            let name = names[index % names.count]
            let round = index / names.count
            return ActivityEvent(
                eventId: "\(name)-\(round)", activityId: name, kind: round == 0 ? .start : .update, attributesType: "DeliveryAttributes",
                fields: ["orderId": .string(name), "storeName": .string("Casa Lola"), "status": .string("out_for_delivery"), "progress": .integer(Int64(round % 100))],
                urgency: .routine, occurredAt: Date(), sequence: Int64(round + 1), source: "latency-bench", bundleId: app.bundleId)
        }
        // Warm-up: every activity's first event (its first content), not measured.
        print("warm-up: \(activities) first events")
        try await pace(0..<activities, rate: rate, producer: producer, produced: nil, event: event)
        try await Task.sleep(for: .seconds(5))

        let total = rate * seconds
        print("measuring: \(total) events at \(rate)/s over \(activities) activities")
        let produced = ProducedAt()
        let cpuBefore = try processes.map { try ProcessStats.cpuSeconds(pid: $0.1) }
        try await pace(activities..<(activities + total), rate: rate, producer: producer, produced: produced, event: event)
        try await Task.sleep(for: .seconds(5))
        let cpuAfter = try processes.map { try ProcessStats.cpuSeconds(pid: $0.1) }
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(stack.simulator)/admin/notifications?payload=false"), timeout: .seconds(60))
        let received = try IsletJSON.decodeValue([AcceptedNotification].self, from: Array(buffer: try await response.body.collect(upTo: 1 << 30)))
        let arrival = Dictionary(received.map { ($0.apnsID.lowercased(), $0.receivedAt) }) { first, _ in first }
        var latencies: [Double] = []
        var missing = 0
        for (id, at) in produced.all {
            if let receivedAt = arrival[id] { latencies.append(receivedAt.timeIntervalSince(at) * 1_000) } else { missing += 1 }
        }
        latencies.sort()
        func percentile(_ p: Double) -> Double { latencies.isEmpty ? .nan : latencies[min(latencies.count - 1, Int(Double(latencies.count) * p))] }
        print(String(format: "end-to-end latency (event produced → simulator received), %d events at %d/s: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms, max %.1f ms; %d not received",
            latencies.count, rate, percentile(0.5), percentile(0.9), percentile(0.99), latencies.last ?? .nan, missing))

        // Over the run: a stack that keeps up has the same latency in every window; one whose
        // broker slows as its topics grow (docs/operations.md) gets slower window by window.
        if let start = produced.all.values.min() {
            var windows: [Int: [Double]] = [:]
            for (id, at) in produced.all {
                guard let receivedAt = arrival[id] else { continue }
                windows[Int(at.timeIntervalSince(start) / 10), default: []].append(receivedAt.timeIntervalSince(at) * 1_000)
            }
            let medians: [String] = windows.keys.sorted().map { window in
                let sorted = windows[window, default: []].sorted()
                return String(format: "%.0f", sorted[sorted.count / 2])
            }
            print("  p50 by 10 s of production (ms): \(medians.joined(separator: ", "))")
        }

        // Where the time goes: content-service stamps each request when it makes it (createdAt).
        let created = try await requestTimes(ids: Set(produced.all.keys))
        var first: [Double] = []
        var second: [Double] = []
        for (id, at) in produced.all {
            guard let createdAt = created[id] else { continue }
            first.append(createdAt.timeIntervalSince(at) * 1_000)
            if let receivedAt = arrival[id] { second.append(receivedAt.timeIntervalSince(createdAt) * 1_000) }
        }
        for (name, values) in [("event produced → request made by content-service", first), ("request made → simulator received", second)] {
            let sorted = values.sorted()
            func p(_ q: Double) -> Double { sorted.isEmpty ? .nan : sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))] }
            print(String(format: "  %@: p50 %.1f ms, p90 %.1f ms, p99 %.1f ms (%d)", name, p(0.5), p(0.9), p(0.99), sorted.count))
        }
        // CPU time each process spent per event while the events were produced (and 5 s after).
        for (index, (name, _)) in processes.enumerated() {
            let perEvent = (cpuAfter[index] - cpuBefore[index]) / Double(total) * 1_000
            print(String(format: "  CPU %@: %.3f ms per event", name, perEvent))
            print("cpu\t\(name)\t\(String(format: "%.4f", perEvent))")
        }
        producer.shutdown()
        try await producing.value
    }

    /// When content-service made each of these requests, read from `islet.push-requests.v1` to its end.
    func requestTimes(ids: Set<String>) async throws -> [String: Date] {
        let progress = try await TopicSnapshot.read([IsletTopics.pushRequests.name], bootstrapServers: stack.bootstrap, timeout: .seconds(600), logger: quiet) {
            $0.reachedEnds
        }
        guard !progress.timedOut else { throw DemoFailure("islet.push-requests.v1 was not read to its end within 10 minutes") }
        var times: [String: Date] = [:]
        for message in progress.messages {
            if let request = try? IsletJSON.decode(PushRequest.self, from: message.value ?? []), ids.contains(request.requestId) {
                times[request.requestId] = request.createdAt
            }
        }
        return times
    }
}

/// Produces the events of `indices` at `rate` per second (each send in its own task); records when each was handed over.
func pace(
    _ indices: Range<Int>, rate: Int, producer: KafkaProducer, produced: ProducedAt?, event: @escaping @Sendable (Int) -> ActivityEvent
) async throws {
    let start = ContinuousClock.now
    // Discarding: a task group keeps each finished child until it is awaited, and a million
    // sends kept 8 GB until the last (the scale benchmark's checker, killed by the kernel).
    try await withThrowingDiscardingTaskGroup { group in
        for index in indices {
            let due = start + .seconds(Double(index - indices.lowerBound) / Double(rate))
            if due > ContinuousClock.now { try await Task.sleep(until: due) }
            group.addTask {
                let event = event(index)
                let at = Date()
                try await producer.send(event, to: IsletTopics.activityEvents.name)
                if let bundleId = event.bundleId {
                    produced?.record(RequestIds.content(bundleId: bundleId, activityId: event.activityId, eventId: event.eventId), at)
                }
            }
        }
    }
}

/// When each measured event was produced, by the request id its push carries.
final class ProducedAt: Sendable {
    private let times = Mutex<[String: Date]>([:])
    func record(_ id: String, _ at: Date) { times.withLock { $0[id] = at } }
    var all: [String: Date] { times.withLock { $0 } }
}
