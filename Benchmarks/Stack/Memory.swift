import APNsSimulator
import ArgumentParser
import AsyncHTTPClient
import Foundation
import IsletDemoKit
import IsletKafka
import IsletMessages
import NIOCore
import TokenRegistry

extension World {
    /// Registers an update token for each activity with token-registry, `lanes` at a time, as the
    /// apps would: each lane is a user of its own (token-registry serializes one user's
    /// registrations, and counts the user's live activities for the quota with each).
    func register(_ names: [String], app: AppTarget, lanes: Int = 32) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for lane in 0..<lanes {
                group.addTask {
                    let jwt = try await jwt(forUser: "bench-user-\(lane)")
                    for (index, name) in names.enumerated() where index % lanes == lane {
                        _ = try await put(
                            "/v1/activities/\(name)/token",
                            RegisterActivityTokenRequest(
                                token: World.token("1a7" + name), attributesType: "DeliveryAttributes", app: app, frequentUpdatesEnabled: false,
                                appVersion: "2.1", activityStartedAt: Date()),
                            jwt: jwt)
                    }
                }
            }
            try await group.waitForAll()
        }
    }
}

/// Memory per live activity: the resident memory of apns-dispatcher and content-service (by pid)
/// before and after `activities` activities became live — registered with token-registry (both
/// services keep the token table) and sent one important event each (content-service remembers the
/// activity's content; the dispatcher its spent priority-10 budget) — and the growth per activity.
/// scripts/bench-memory.sh runs it against the whole product.
struct Memory: AsyncParsableCommand {
    @OptionGroup var stack: StackOptions
    @Option var activities = 100_000
    @Option(help: "Events per second.") var rate = 1_500
    @Option(help: "Registrations in flight at once.") var lanes = 256
    @Option(help: "A process to measure, name=pid (repeatable).") var process: [String]
    @Option(help: "apns-dispatcher's Prometheus metrics.") var dispatcherMetrics = "http://127.0.0.1:8082/metrics"
    @Option(help: "content-service's Prometheus metrics.") var contentMetrics = "http://127.0.0.1:8083/metrics"

    func run() async throws {
        let processes = try ProcessStats.parse(process)
        let (producer, producing, world) = try await stack.connect()
        let names = (0..<activities).map { "mem-\(world.run)-\($0)" }
        let app = AppTarget(bundleId: "com.example.food", environment: .production)
        let services = [("apns-dispatcher", dispatcherMetrics), ("content-service", contentMetrics)]

        let before = try processes.map { try ProcessStats.residentBytes(pid: $0.1) }
        let acceptedBefore = try await stack.acceptedPushes()
        var metricsBefore: [PrometheusSample] = []
        for (_, url) in services { metricsBefore.append(try await PrometheusSample.scrape(url)) }
        let started = ContinuousClock.now
        print("registering \(activities) activities, \(lanes) at a time")
        try await world.register(names, app: app, lanes: lanes)
        print("registered in \(ContinuousClock.now - started)")
        // The services learn the tokens from the token topic: a push whose token has not reached the
        // dispatcher's table within its token wait ends as token-invalid. How far behind they are:
        let registered = ContinuousClock.now
        for (index, (name, url)) in services.enumerated() {
            let target = metricsBefore[index].sum("islet_tokens_table_size") + Double(activities)
            var last = (size: -1.0, at: ContinuousClock.now)
            while true {
                let size = try await PrometheusSample.scrape(url).sum("islet_tokens_table_size")
                if size >= target { break }
                if size != last.size { last = (size, ContinuousClock.now) }
                if ContinuousClock.now - last.at > .seconds(60) {
                    print("\(name)'s token table stopped at \(Int(size)) of \(Int(target)) tokens")
                    break
                }
                try await Task.sleep(for: .milliseconds(200))
            }
            print("\(name)'s token table had every token \(ContinuousClock.now - registered) after the last registration was answered")
        }
        print("producing one important event each at \(rate)/s")
        try await pace(0..<activities, rate: rate, producer: producer, produced: nil) { index in
            let name = names[index]
            return ActivityEvent(
                eventId: "\(name)-0", activityId: name, kind: .start, attributesType: "DeliveryAttributes",
                fields: ["orderId": .string(name), "storeName": .string("Casa Lola"), "status": .string("preparing"), "progress": .integer(5)],
                urgency: .important, occurredAt: Date(), sequence: 1, source: "memory-bench", bundleId: app.bundleId)
        }
        // Every push reached the simulator (or nothing moved for a minute): the activities are live in both services.
        var accepted = 0
        var last = (count: -1, at: ContinuousClock.now)
        while accepted < activities {
            accepted = try await stack.acceptedPushes() - acceptedBefore
            if accepted != last.count { last = (accepted, ContinuousClock.now) }
            if ContinuousClock.now - last.at > .seconds(60) { break }
            try await Task.sleep(for: .seconds(1))
        }
        try await Task.sleep(for: .seconds(3))
        let after = try processes.map { try ProcessStats.residentBytes(pid: $0.1) }
        print("\(accepted) of \(activities) pushes received by the simulator after \(ContinuousClock.now - started)")
        // Where the events went: content-service's results and the dispatcher's final outcomes.
        for (index, (name, url)) in services.enumerated() {
            let family = name == "apns-dispatcher" ? "islet_dispatcher_outcomes_total" : "islet_content_events_total"
            let counts = try await PrometheusSample.scrape(url).subtracting(metricsBefore[index]).byLabel(family, "result")
            let listed: [String] = counts.keys.sorted().map { key in "\(key) \(Int(counts[key] ?? 0))" }
            print("\(name) \(family): \(listed.joined(separator: ", "))")
        }
        for (index, (name, _)) in processes.enumerated() {
            let perActivity = Double(after[index] - before[index]) / Double(activities)
            print(String(format: "%@: %.1f MB resident before, %.1f MB with %d live activities: %.0f bytes per activity",
                name, Double(before[index]) / 1e6, Double(after[index]) / 1e6, activities, perActivity))
            print("memory\t\(name)\t\(Int(perActivity.rounded()))\t\(before[index])\t\(after[index])")
        }
        producer.shutdown()
        try await producing.value
        if accepted < activities { throw ValidationError("only \(accepted) of \(activities) pushes arrived: the figures above undercount") }
    }

}

extension StackOptions {
    /// The pushes the simulator accepted so far.
    func acceptedPushes() async throws -> Int { try await stats().accepted }

    /// The simulator's counters.
    func stats() async throws -> SimulatorStats {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: "\(simulator)/admin/stats"), timeout: .seconds(30))
        return try IsletJSON.decodeValue(SimulatorStats.self, from: Array(buffer: try await response.body.collect(upTo: 1 << 20)))
    }

    /// A page of the pushes the simulator accepted, without their bodies: `count` after the `from` oldest.
    func notifications(from: Int, count: Int) async throws -> [AcceptedNotification] {
        let response = try await HTTPClient.shared.execute(
            HTTPClientRequest(url: "\(simulator)/admin/notifications?payload=false&from=\(from)&count=\(count)"), timeout: .seconds(120))
        return try IsletJSON.decodeValue([AcceptedNotification].self, from: Array(buffer: try await response.body.collect(upTo: 1 << 28)))
    }

    /// Every push the simulator accepted, without its body.
    func notifications() async throws -> [AcceptedNotification] {
        let response = try await HTTPClient.shared.execute(
            HTTPClientRequest(url: "\(simulator)/admin/notifications?payload=false"), timeout: .seconds(120))
        return try IsletJSON.decodeValue([AcceptedNotification].self, from: Array(buffer: try await response.body.collect(upTo: 1 << 30)))
    }
}
