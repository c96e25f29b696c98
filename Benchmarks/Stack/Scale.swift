import APNsSimulator
import ArgumentParser
import Foundation
import IsletDemoKit
import IsletKafka
import IsletMessages
import NIOCore

/// Two instances of apns-dispatcher and of content-service sharing the activity partitions, driven
/// through the product's own paths (issue 24): `activities` activities registered with
/// token-registry's API, one event each through Kafka; every instance's resident memory and the
/// activities it holds; then a `kill -9` of one instance of each service and the time until the
/// survivors hold every activity; then a second event each, and whether every activity's latest
/// content reached the simulator exactly once. `scripts/bench-scale-stack.sh` starts the product
/// with the second instances (`scripts/demo.sh --scale`) and runs it.
struct Scale: AsyncParsableCommand {
    @OptionGroup var stack: StackOptions
    @Option var activities = 100_000
    @Option(help: "Events per second.") var rate = 1_500
    @Option(help: "Registrations in flight at once.") var lanes = 256
    @Option(help: "An instance: content:NAME=PID@METRICS_URL or dispatcher:NAME=PID@METRICS_URL (repeatable).") var instance: [String]
    @Option(help: "The instance killed with SIGKILL once the activities are live (repeatable: one of each service).") var kill: [String] = []
    @Option(help: "How long nothing may move before a wait gives up, in seconds.") var stallSeconds = 120

    struct Instance {
        enum Kind: String { case content, dispatcher }
        var kind: Kind
        var name: String
        var pid: Int32
        var metrics: String

        init(_ option: String) throws {
            let usage = ValidationError("--instance takes content:NAME=PID@URL or dispatcher:NAME=PID@URL, not \(option)")
            guard let colon = option.firstIndex(of: ":"), let kind = Kind(rawValue: String(option[..<colon])),
                let equals = option.firstIndex(of: "="), let at = option.firstIndex(of: "@"), equals < at,
                let pid = Int32(option[option.index(after: equals)..<at])
            else { throw usage }
            self.kind = kind
            name = String(option[option.index(after: colon)..<equals])
            self.pid = pid
            metrics = String(option[option.index(after: at)...])
        }

        /// The activities it holds: content-service's live activities by freshness class (recorded
        /// by each monitor pass, every 5 s), the dispatcher's token table (its partitions' tokens).
        func held() async throws -> Int {
            let sample = try await PrometheusSample.scrape(metrics)
            return Int(sample.sum(kind == .content ? "islet_content_activities" : "islet_tokens_table_size"))
        }

        func tokens() async throws -> Int { Int(try await PrometheusSample.scrape(metrics).sum("islet_tokens_table_size")) }
    }

    func run() async throws {
        let instances = try instance.map(Instance.init)
        guard Set(kill).isSubset(of: Set(instances.map(\.name))) else { throw ValidationError("--kill names an instance not given") }
        let (producer, producing, world) = try await stack.connect()
        let names = (0..<activities).map { "scale-\(world.run)-\($0)" }
        let app = AppTarget(bundleId: "com.example.food", environment: .production)
        let before = try instances.map { try ProcessStats.residentBytes(pid: $0.pid) }
        let acceptedBefore = try await stack.acceptedPushes()
        let started = ContinuousClock.now

        say("registering \(activities) activities through token-registry's API, \(lanes) at a time")
        try await world.register(names, app: app, lanes: lanes)
        say("registered in \(ContinuousClock.now - started)")
        // Every content-service holds the whole token table; the dispatchers one part each.
        try await until("the token tables hold every token") {
            var dispatchers = 0
            for instance in instances {
                let tokens = try await instance.tokens()
                if instance.kind == .content, tokens < activities { return "\(instance.name) \(tokens)" }
                if instance.kind == .dispatcher { dispatchers += tokens }
            }
            return dispatchers >= activities ? nil : "dispatchers \(dispatchers)"
        }

        say("one event each through Kafka at \(rate)/s")
        try await pace(0..<activities, rate: rate, producer: producer, produced: nil) { index in
            ActivityEvent(
                eventId: "\(names[index])-1", activityId: names[index], kind: .start, attributesType: "DeliveryAttributes",
                fields: ["orderId": .string(names[index]), "storeName": .string("Casa Lola"), "status": .string("preparing"), "progress": .integer(5)],
                urgency: .important, occurredAt: Date(), sequence: 1, source: "scale-bench", bundleId: app.bundleId)
        }
        try await until("the simulator has a push for every activity") {
            let accepted = try await stack.acceptedPushes() - acceptedBefore
            return accepted >= activities ? nil : "\(accepted)"
        }
        say("every activity live after \(ContinuousClock.now - started); resident memory read after a pass of FreeMemory (35 s)")
        try await Task.sleep(for: .seconds(35))
        var held: [Int] = []
        for instance in instances { held.append(try await instance.held()) }
        let live = try instances.map { try ProcessStats.residentBytes(pid: $0.pid) }
        say("instance               held   VmRSS before   VmRSS live   bytes per activity held")
        for (index, instance) in instances.enumerated() {
            let perActivity = held[index] > 0 ? Double(live[index] - before[index]) / Double(held[index]) : 0
            let name = instance.name.padding(toLength: 20, withPad: " ", startingAt: 0)
            say(name + String(format: " %7d %11.1f MB %10.1f MB %12.0f", held[index], Double(before[index]) / 1e6, Double(live[index]) / 1e6, perActivity))
        }

        // A kill -9 of one instance of each service: the survivors take their partitions over.
        let killed = instances.filter { kill.contains($0.name) }
        let survivors = instances.filter { !kill.contains($0.name) }
        let killedAt = ContinuousClock.now
        for instance in killed {
            say("kill -9 \(instance.name) (pid \(instance.pid))")
            _ = Foundation.kill(instance.pid, SIGKILL)
        }
        var takeover: [String: Duration] = [:]
        try await until("the survivors hold every activity") {
            var waiting: [String] = []
            for kind in [Instance.Kind.content, .dispatcher] where killed.contains(where: { $0.kind == kind }) {
                let mine = survivors.filter { $0.kind == kind }
                var total = 0
                for instance in mine { total += try await instance.held() }
                if total >= activities {
                    if takeover[kind.rawValue] == nil { takeover[kind.rawValue] = ContinuousClock.now - killedAt }
                } else {
                    waiting.append("\(kind.rawValue) \(total)")
                }
            }
            return waiting.isEmpty ? nil : waiting.joined(separator: ", ")
        }
        var restoreSeconds: [String: Double] = [:]
        for instance in survivors {
            let sample = try await PrometheusSample.scrape(instance.metrics)
            restoreSeconds[instance.name] = instance.kind == .content
                ? sample.sum("islet_content_memory_restore_seconds")
                : sample.sum("islet_tokens_restore_seconds_sum") / max(sample.sum("islet_tokens_restore_seconds_count"), 1)
        }
        for (kind, took) in takeover.sorted(by: { $0.key < $1.key }) { say("\(kind): the survivors hold every activity \(took) after the kill") }

        // A second event each: the survivors alone make and send it.
        say("a second event each")
        try await pace(0..<activities, rate: rate, producer: producer, produced: nil) { index in
            ActivityEvent(
                eventId: "\(names[index])-2", activityId: names[index], kind: .update, attributesType: "DeliveryAttributes",
                fields: ["orderId": .string(names[index]), "storeName": .string("Casa Lola"), "status": .string("out_for_delivery"), "progress": .integer(60)],
                urgency: .important, occurredAt: Date(), sequence: 2, source: "scale-bench", bundleId: app.bundleId)
        }
        let tokens = Dictionary(uniqueKeysWithValues: names.indices.map { (World.token("1a7" + names[$0]), Int32($0)) })
        // Per activity, its contents received (by their timestamp) and how many pushes of each,
        // read from the simulator a page at a time: at a million activities the whole list in one
        // answer, decoded, took 8 GB of the checker's memory.
        func contents() async throws -> Received {
            let accepted = try await stack.acceptedPushes()
            var received = Received(activities: activities)
            var kept = 0
            while true {
                let page = try await stack.notifications(from: kept, count: Received.page)
                for notification in page {
                    if let index = tokens[notification.token] { received.add(Int(index), timestamp: notification.timestamp) }
                }
                kept += page.count
                if page.count < Received.page { break }
            }
            // The simulator keeps the latest ISLET_SIMULATOR_RECORD_CAPACITY pushes: the dropped
            // would count as never received.
            guard kept >= accepted else {
                throw ValidationError(
                    "the simulator kept \(kept) of the \(accepted) pushes it accepted: raise ISLET_SIMULATOR_RECORD_CAPACITY above \(accepted)")
            }
            return received
        }
        do {
            try await until("the simulator has a second push for every activity") {
                let accepted = try await stack.acceptedPushes() - acceptedBefore
                return accepted >= 2 * activities ? nil : "\(accepted)"
            }
        } catch {
            try await diagnose(names: names, contents: try await contents(), survivors: survivors)
            throw error
        }
        // Every activity's latest content reached the phone once: per token, one push of each content.
        let contents = try await contents()
        let latestOnce = names.indices.filter(contents.bothOnce).count
        let twice = names.indices.filter(contents.anyTwice).count
        let after = try survivors.map { try ProcessStats.residentBytes(pid: $0.pid) }
        var heldAfter: [Int] = []
        for instance in survivors { heldAfter.append(try await instance.held()) }
        for (index, instance) in survivors.enumerated() {
            say(String(format: "%@ after the kill: holds %d, VmRSS %.1f MB, last restore %.2f s", instance.name, heldAfter[index], Double(after[index]) / 1e6,
                restoreSeconds[instance.name] ?? 0))
        }
        say("\(latestOnce) of \(activities) activities received both contents exactly once; \(twice) received a content more than once")

        var result = "RESULT scale-stack activities=\(activities)"
        for (index, instance) in instances.enumerated() {
            result += " \(instance.name)_held=\(held[index]) \(instance.name)_rss_mb=\(String(format: "%.1f", Double(live[index]) / 1e6))"
            result += " \(instance.name)_bytes_per_activity=\(held[index] > 0 ? Int((Double(live[index] - before[index]) / Double(held[index])).rounded()) : 0)"
        }
        for (kind, took) in takeover { result += " \(kind)_takeover_s=\(String(format: "%.1f", took / .seconds(1)))" }
        for (index, instance) in survivors.enumerated() {
            result += " \(instance.name)_rss_mb_after=\(String(format: "%.1f", Double(after[index]) / 1e6))"
            result += " \(instance.name)_restore_s=\(String(format: "%.2f", restoreSeconds[instance.name] ?? 0))"
        }
        result += " latest_once=\(latestOnce) received_twice=\(twice)"
        say(result)
        producer.shutdown()
        try await producing.value
        if latestOnce < activities {
            try await diagnose(names: names, contents: contents, survivors: survivors)
            throw ValidationError("\(activities - latestOnce) activities did not receive both contents exactly once")
        }
    }

    /// Where the activities short of their two contents are (their partition of the activity
    /// topics), and what the survivors' counters say: what a run that fell short needs to be explained.
    private func diagnose(names: [String], contents: Received, survivors: [Instance]) async throws {
        let admin = try KafkaAdmin(configuration: .init(bootstrapServers: stack.bootstrap), logger: quiet)
        let partitions = Int32(try await admin.partitionCount(of: IsletTopics.activityEvents.name) ?? 1)
        var short: [Int32: (none: Int, one: Int)] = [:]
        for (index, name) in names.enumerated() {
            let received = contents.distinct(index)
            guard received < 2 else { continue }
            let partition = KafkaPartitioner.partition(ofKey: MessageKey.activity(name), partitions: partitions)
            if received == 0 { short[partition, default: (0, 0)].none += 1 } else { short[partition, default: (0, 0)].one += 1 }
        }
        say("activities short of their two contents, by partition of \(IsletTopics.activityEvents.name):")
        for (partition, count) in short.sorted(by: { $0.key < $1.key }) {
            say("  partition \(partition): \(count.one) with one content, \(count.none) with none")
        }
        let counters = [
            "islet_content_events_in_total", "islet_content_events_total", "islet_kafka_dead_lettered_total", "islet_kafka_consumer_lag_records",
            "islet_kafka_consumer_messages_total", "islet_dispatcher_requests_total", "islet_dispatcher_outcomes_total", "islet_dispatcher_duplicates_total",
        ]
        let refused = try await stack.stats().rejected
        say("the simulator refused: \(refused.isEmpty ? "nothing" : refused.sorted { $0.key < $1.key }.map { "\($0.key) ×\($0.value)" }.joined(separator: ", "))")
        for instance in survivors {
            let sample = try await PrometheusSample.scrape(instance.metrics)
            for (key, value) in sample.samples.sorted(by: { "\($0.key)" < "\($1.key)" }) where counters.contains(key.name) {
                let labels = key.labels.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }.joined(separator: ",")
                say("  \(instance.name) \(key.name){\(labels)} \(Int(value))")
            }
        }
    }

    /// Polls `progress` (nil: done; else what it stands at) every second until it is done; gives
    /// up when what it says has not changed for `stallSeconds`.
    private func until(_ what: String, _ progress: () async throws -> String?) async throws {
        var last = (said: "", at: ContinuousClock.now)
        while let said = try await progress() {
            if said != last.said { last = (said, ContinuousClock.now) }
            if ContinuousClock.now - last.at > .seconds(stallSeconds) { throw ValidationError("\(what): stuck at \(said) for \(stallSeconds) s") }
            try await Task.sleep(for: .seconds(1))
        }
    }
}

/// What the simulator received, per activity (by its index): up to two contents (their
/// `aps.timestamp`, 0 for none) with how many pushes of each, and how many pushes carried a
/// third content or more. About 20 bytes an activity.
struct Received {
    /// The simulator's pushes are read this many at a time.
    static let page = 100_000
    private var timestamps: [Int64]
    private var counts: [UInt8]
    private var more: [UInt8]

    init(activities: Int) {
        timestamps = Array(repeating: 0, count: 2 * activities)
        counts = Array(repeating: 0, count: 2 * activities)
        more = Array(repeating: 0, count: activities)
    }

    mutating func add(_ index: Int, timestamp: Int64) {
        for slot in [2 * index, 2 * index + 1] {
            if timestamps[slot] == timestamp {
                counts[slot] = counts[slot] &+ (counts[slot] == .max ? 0 : 1)
                return
            }
            if timestamps[slot] == 0 {
                (timestamps[slot], counts[slot]) = (timestamp, 1)
                return
            }
        }
        if more[index] < .max { more[index] += 1 }
    }

    /// Contents received (a third or more counts as one more).
    func distinct(_ index: Int) -> Int {
        (timestamps[2 * index] != 0 ? 1 : 0) + (timestamps[2 * index + 1] != 0 ? 1 : 0) + (more[index] > 0 ? 1 : 0)
    }

    /// Exactly two contents, each once.
    func bothOnce(_ index: Int) -> Bool { distinct(index) == 2 && counts[2 * index] == 1 && counts[2 * index + 1] == 1 }

    /// A content received more than once.
    func anyTwice(_ index: Int) -> Bool { counts[2 * index] > 1 || counts[2 * index + 1] > 1 }
}

/// Writes a line at once: the scripts read this through a pipe, where `print`'s buffer would hold
/// a run's progress (most of an hour at a million activities) until it ends.
func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
