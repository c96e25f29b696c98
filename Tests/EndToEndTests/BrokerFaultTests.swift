import APNsSimulator
import Foundation
import IsletKafka
import IsletLinks
import IsletMessages
import Synchronization
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The stalls to try, in seconds (the issue's 10 and 60 by default).
private let brokerStalls = ProcessInfo.processInfo.environment["ISLET_E2E_STALLS"].map { $0.split(separator: ",").compactMap { Int($0) } } ?? [10, 60]

extension EndToEnd {
    @Suite("End to end: the broker stalls", .timeLimit(.minutes(10)))
    struct BrokerStallTests {
        @Test("the broker stopped with SIGSTOP for 10 s and for 60 s under steady load: /health/ready says not ready during the stall, every service serves again within 30 s of SIGCONT, the ledger holds")
        func stalls() async throws {
            let stack = try Stack(name: "broker-stall")
            try await stack.start()
            // The suite's own broker: stopped and resumed by its process id.
            let pid = try #require(stack.brokerPID)
            let driver = try Driver(stack: stack)
            let load = SteadyLoad(stack: stack, driver: driver)
            do {
                try await load.prepare()
                let running = Task { await load.run() }
                try await stack.waitForPushes(20, within: .seconds(60))
                for seconds in brokerStalls {
                    let stall = try await BrokerStall.run(pid: pid, for: .seconds(seconds), stack: stack, driver: driver)
                    stall.expectRecovered(after: "broker stall \(seconds) s")
                }
                load.stop()
                await running.value
                try await load.verify(label: "broker stall")
            } catch {
                Issue.record(error)
            }
            _ = kill(pid, SIGCONT)  // whatever happened, the broker runs again for the suites after this one
            load.stop()
            await driver.close()
            await stack.stop()
        }
    }
}


/// A steady trickle through every service while the broker misbehaves: a registration, a tap and
/// an event every quarter of a second. The backend retries an event until Kafka acknowledges it
/// (same event id); the app's registrations and taps are not retried (each attempt is counted).
final class SteadyLoad: Sendable {
    let stack: Stack
    let driver: Driver
    let registrations = Answers()
    let taps = Answers()
    private let activities = (0..<20).map { "steady-\($0)" }
    private let running = Flag()
    private let acknowledged = Atomic<Int>(0)

    init(stack: Stack, driver: Driver) {
        self.stack = stack
        self.driver = driver
    }

    /// Events acknowledged by Kafka.
    var published: Int { acknowledged.load(ordering: .acquiring) }

    func stop() { running.lower() }

    /// After the load stopped: every acknowledged event has its push request and each request
    /// exactly one outcome (identical copies of an outcome written again after a write timed out
    /// are counted apart), no push reached the simulator twice, every accepted tap is on the clicks
    /// topic and every registration answered 201 on the tokens topic.
    func verify(label: String) async throws {
        let published = self.published
        let ledger = try await Ledger.settle(bootstrap: stack.bootstrap, prefix: driver.run, expecting: published, timeout: .seconds(120))
        let received = try await stack.received(payloads: false).filter { ledger.requests[$0.apnsID.lowercased()] != nil }
        let clicks = Set(
            try await readToEnd([IsletTopics.clicks.name], bootstrap: stack.bootstrap).compactMap {
                try? IsletJSON.decode(ClickEvent.self, from: $0.value ?? []).clickId
            })
        let tokenKeys = Set(try await readToEnd([IsletTopics.tokens.name], bootstrap: stack.bootstrap).compactMap { $0.key.map { String(decoding: $0, as: UTF8.self) } })
        print("\(label): \(published) events acknowledged, \(ledger.requests.count) requests, outcomes \(ledger.results.map { "\($0.key.rawValue) \($0.value)" }.sorted()); registrations \(registrations.summary); taps \(taps.summary)")
        let violations = ledger.violations(countingCopies: false)
        print("\(label): \(ledger.copiedOutcomes) outcomes written twice (identical copies after a write timed out)")
        #expect(violations.isEmpty, "\(violations.prefix(20)) (\(violations.count) in all)")
        #expect(ledger.requests.count >= published, "every acknowledged event has its push request")
        let duplicates = Dictionary(grouping: received) { $0.apnsID.lowercased() }.values.filter { $0.count > 1 }
        #expect(duplicates.isEmpty, "pushes received twice: \(duplicates.count)")
        for copies in duplicates {
            #expect(Set(copies.map(\.timestamp)).count == 1, "a duplicate differs: \(copies.map(\.timestamp))")
        }
        #expect(taps.accepted.isSubset(of: clicks), "accepted taps missing on the clicks topic: \(taps.accepted.subtracting(clicks).count)")
        // Every registration is of the food app: its key on the topic is the app's activity.
        let missing = registrations.accepted.filter { !tokenKeys.contains(MessageKey.activity(bundleId: "com.example.food", activityId: $0)) }
        #expect(missing.isEmpty, "registrations answered 201 and not on the tokens topic: \(missing.prefix(5))")
    }

    /// Registers the activities the events go to.
    func prepare() async throws {
        for activity in activities {
            try await driver.registerActivity(driver.run + activity, token: Driver.token(driver.run + activity), type: "DeliveryAttributes", bundleId: "com.example.food")
        }
    }

    func run() async {
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await self.events() }
            group.addTask { await self.registerAndTap() }
        }
    }

    private func events() async {
        var sequence: Int64 = 0
        while running.isRaised {
            sequence += 1
            for activity in activities where running.isRaised {
                let kind: ActivityEventKind = sequence == 1 ? .start : .update
                let event = driver.event(
                    driver.run + activity, kind, type: "DeliveryAttributes", sequence: sequence,
                    fields: ["orderId": .string(activity), "storeName": "Casa Lola", "status": "out_for_delivery", "courier": ["name": "Ana"], "progress": .integer(sequence % 100)])
                // The backend retries until Kafka acknowledges (a retry is the same event).
                while true {
                    do {
                        try await driver.publish(event)
                        acknowledged.add(1, ordering: .releasing)
                        break
                    } catch {
                        try? await Task.sleep(for: .milliseconds(250))
                    }
                }
                try? await Task.sleep(for: .milliseconds(250))
            }
        }
    }

    private func registerAndTap() async {
        var number = 0
        while running.isRaised {
            number += 1
            let activity = "\(driver.run)reg-\(number)"
            do {
                _ = try await driver.registerActivity(activity, token: Driver.token(activity), type: "DeliveryAttributes", bundleId: "com.example.food", retryFor: .zero)
                registrations.accept(activity)
            } catch let failure as E2EFailure {
                registrations.refuse(failure.status ?? 0)
            } catch {
                registrations.refuse(0)
            }
            switch await stack.forwardTap(activity: driver.run + activities[number % activities.count]) {
            case .success(let id): taps.accept(id)
            case .failure(let refused): taps.refuse(refused.status)
            }
            try? await Task.sleep(for: .milliseconds(250))
        }
    }
}

/// Something done to the broker for a while, then undone.
struct BrokerFault: Sendable {
    /// For the log and the probes' activity ids ("stall-10", "down-12" …).
    let name: String
    /// Whether the broker stops answering meanwhile: then every service must say not ready in
    /// the fault's second half. A fault the broker keeps answering through (a leader moving, a few
    /// refused requests) need not make a service not ready.
    let outage: Bool
    let begin: @Sendable () throws -> Void
    let end: @Sendable () throws -> Void

    /// The broker process stopped with SIGSTOP, then resumed with SIGCONT.
    static func stall(pid: Int32, seconds: Int) -> BrokerFault {
        BrokerFault(
            name: "stall-\(seconds)", outage: true,
            begin: { guard kill(pid, SIGSTOP) == 0 else { throw E2EFailure("SIGSTOP to the broker (pid \(pid)) failed") } },
            end: { guard kill(pid, SIGCONT) == 0 else { throw E2EFailure("SIGCONT to the broker (pid \(pid)) failed") } })
    }
}

/// One fault of the broker and what the services did.
struct BrokerStall {
    /// `/health/ready` answers of 200 in the outage's second half (by then every service must
    /// know: 5 s without an answer from Kafka makes a client not ready).
    var readyWhileStalled: [String] = []
    /// How long after the fault ended each kind of work succeeded again (`nil`: not within 60 s).
    var recovery: [(String, Duration?)] = []

    var summary: String {
        recovery.map { "\($0.0) \($0.1.map { String(format: "%.1f s", $0 / .seconds(1)) } ?? "—")" }
            .joined(separator: ", ")
    }

    static let services: [ServiceProcess.Name] = [.registry, .content, .dispatcher, .ingest]

    /// Prints the recovery times and expects what every fault must show: no `/health/ready` 200
    /// during an outage, and every kind of work back within 30 s — 45 s for what needs the
    /// consumer groups to rejoin (an event at APNs, every service ready), which tansu holds for
    /// about 15 s per join: measured 18–19 s, twice that on a starved machine.
    func expectRecovered(after fault: String, sourceLocation: SourceLocation = #_sourceLocation) {
        print("\(fault): \(summary)")
        #expect(readyWhileStalled.isEmpty, "said ready during \(fault): \(readyWhileStalled)", sourceLocation: sourceLocation)
        for (what, took) in recovery {
            let limit: Duration = what.hasPrefix("registration") || what.hasPrefix("tap") ? .seconds(30) : .seconds(45)
            #expect(
                took != nil && took! <= limit, "\(what) after \(fault): \(took.map { "\($0)" } ?? "not within 60 s")",
                sourceLocation: sourceLocation)
        }
    }

    static func run(pid: Int32, for length: Duration, stack: Stack, driver: Driver) async throws -> BrokerStall {
        try await run(.stall(pid: pid, seconds: Int(length.components.seconds)), for: length, stack: stack, driver: driver)
    }

    static func run(_ fault: BrokerFault, for length: Duration, stack: Stack, driver: Driver) async throws -> BrokerStall {
        var stall = BrokerStall()
        try fault.begin()
        let stopped = ContinuousClock.now
        if fault.outage {
            // The second half of the outage (at least 8 s in): every service says not ready.
            let from = stopped + max(.seconds(8), length / 2)
            try await Task.sleep(until: from)
            while ContinuousClock.now < stopped + length - .milliseconds(500) {
                for service in services where await HTTP.status(stack.url(service) + "/health/ready") == 200 {
                    stall.readyWhileStalled.append("\(service.rawValue) at \(ContinuousClock.now - stopped)")
                }
                try await Task.sleep(for: .milliseconds(500))
            }
        }
        try await Task.sleep(until: stopped + length)
        try fault.end()
        let resumed = ContinuousClock.now
        let limit = resumed + .seconds(60)

        func first(_ attempt: @Sendable () async -> Bool) async -> Duration? {
            while ContinuousClock.now < limit {
                if await attempt() { return ContinuousClock.now - resumed }
                try? await Task.sleep(for: .milliseconds(250))
            }
            return nil
        }
        let run = driver.run
        let marker = "\(run)after-\(fault.name)"
        async let registration = first {
            let activity = "\(marker)-probe-\(UUID().uuidString.prefix(6))"
            return (try? await driver.registerActivity(activity, token: Driver.token(activity), type: "DeliveryAttributes", bundleId: "com.example.food", retryFor: .zero)) != nil
        }
        async let tap = first {
            if case .success = await stack.forwardTap(activity: marker) { return true }
            return false
        }
        async let ready = first {
            for service in services where await HTTP.status(stack.url(service) + "/health/ready") != 200 { return false }
            return true
        }
        // An event for a new activity reaches the simulator: registered (retried), published
        // (retried), turned into a push and sent.
        async let push: Duration? = {
            let token = Driver.token(marker)
            guard (try? await driver.registerActivity(marker, token: token, type: "DeliveryAttributes", bundleId: "com.example.food", retryFor: .seconds(60))) != nil
            else { return nil }
            let event = driver.event(
                marker, .update, type: "DeliveryAttributes", sequence: 1,
                fields: ["orderId": .string(marker), "storeName": "Casa Lola", "status": "out_for_delivery", "courier": ["name": "Ana"], "progress": 50])
            while ContinuousClock.now < limit {
                if (try? await driver.publish(event)) != nil { break }
                try? await Task.sleep(for: .milliseconds(250))
            }
            return await first { ((try? await stack.received(token: token, payloads: false)) ?? []).isEmpty == false }
        }()
        stall.recovery = [
            ("registration 201", await registration), ("tap 200", await tap), ("event at APNs", await push), ("every /health/ready 200", await ready),
        ]
        return stall
    }
}
