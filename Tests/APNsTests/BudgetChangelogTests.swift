@testable import APNsDispatcher
import Crypto
import Foundation
import IsletMessages
import IsletRuntime
import IsletTesting
import Testing

@Suite("The budgets' changelog: what an instance writes, and what the next owner of a partition goes on with", .timeLimit(.minutes(1)))
struct BudgetChangelogTests {
    static let limits = BudgetPolicy.Limits(capacity: 3, period: .seconds(3_600))
    static let now = Date(timeIntervalSince1970: 1_795_000_000)

    static func policy() -> DispatcherPolicy {
        var policy = DispatcherPolicy()
        policy.budgets.standard = limits
        return policy
    }

    @Test("priority-10 sends mark their activity's budget changed in their partition, taken once; priority 5 marks nothing; a budget full again is a tombstone")
    func changes() throws {
        let h = EngineHarness(policy: Self.policy())
        h.register("a", token: hexToken(1))
        h.register("b", token: hexToken(2))
        for sequence in 1...2 {
            h.submit(h.request("a", sequence: Int64(sequence), supersedable: false), partition: 1)
        }
        h.submit(h.request("b", sequence: 1, priority: 5), partition: 2)
        h.outcomes(3)

        #expect(h.budgets { $0.takeChanges(partitions: [2]) }.isEmpty, "priority 5 spends nothing")
        let changes = h.budgets { $0.takeChanges(partitions: [0, 1, 2]) }
        try #require(changes.count == 1)
        #expect(changes[0].key == .activity("com.example.food/a"))
        #expect(changes[0].partition == 1)
        let budget = try #require(changes[0].budget)
        #expect(abs(budget.available(now: h.clock.date) - 1) < 0.01)
        #expect(h.budgets { $0.takeChanges(partitions: [1]) }.isEmpty, "taken once")

        // Not written: handed back, taken again.
        h.budgets { $0.changedAgain(changes) }
        #expect(h.budgets { $0.takeChanges(partitions: [1]) }.count == 1)

        // Full again an hour later: forgotten by the sweep, and a tombstone.
        h.advance(3_600)
        h.budgets { $0.sweep(now: h.clock.date) }
        let forgotten = h.budgets { $0.takeChanges(partitions: [1]) }
        #expect(forgotten.count == 1)
        #expect(forgotten.first?.budget == nil)
    }

    @Test("changes of a partition that is another instance's now are not kept")
    func tracking() {
        let h = EngineHarness(policy: Self.policy())
        h.register("a", token: hexToken(1))
        h.register("b", token: hexToken(2))
        h.submit(h.request("a", sequence: 1), partition: 1)
        h.submit(h.request("b", sequence: 1), partition: 2)
        #expect(h.budgets { $0.changeCount(partitions: [1, 2]) } == 2)
        h.budgets { $0.trackChanges(of: [2]) }
        #expect(h.budgets { $0.changeCount(partitions: [1, 2]) } == 1)
        #expect(h.budgets { $0.takeChanges(partitions: [1, 2]) }.map(\.partition) == [2])
    }

    @Test("a record read back: taken when no budget is known; of two, the more spent (refilled to now) stays; a full one or one of other limits changes nothing")
    func merge() {
        let key = BudgetBook.Key.activity("com.example.food/a")
        let now = Self.now
        var book = BudgetBook()
        /// Whole sends left now, or nil when no budget is held.
        func available() -> Double? {
            return book.activityKeys.contains("com.example.food/a") ? Double(book.remaining(for: "com.example.food/a", now: now) ?? -1) : nil
        }
        // Full by now (spent two hours ago): nothing to remember.
        book.restore(key, partition: 1, budget: Budget(limits: Self.limits, available: 0, updatedAt: now.addingTimeInterval(-7_200)), waitingSince: nil, now: now)
        #expect(available() == nil)
        // None known: taken. 0.5 left 20 minutes ago → 1.5 now (3 an hour).
        book.restore(key, partition: 1, budget: Budget(limits: Self.limits, available: 0.5, updatedAt: now.addingTimeInterval(-1_200)), waitingSince: nil, now: now)
        #expect(available() == 1)
        #expect(book.changeCount(partitions: [1]) == 0, "a restored budget is not written again")
        // Less spent than the one known (its own record, read back late): kept as it is.
        book.restore(key, partition: 1, budget: Budget(limits: Self.limits, available: 2.5, updatedAt: now), waitingSince: nil, now: now)
        #expect(available() == 1)
        // More spent: it wins.
        book.restore(key, partition: 1, budget: Budget(limits: Self.limits, available: 0.2, updatedAt: now), waitingSince: nil, now: now)
        #expect(available() == 0)
        // Other limits (the frequent-updates flag changed since): the known one stays.
        book.restore(
            key, partition: 1, budget: Budget(limits: .init(capacity: 240, period: .seconds(3_600)), available: 0, updatedAt: now), waitingSince: nil,
            now: now)
        #expect(available() == 0)
        #expect(!book.isFresh("com.example.food/a", now: now))
    }

    @Test("an instance that reads the changelog of a partition goes on with the budgets spent on another: the next priority-10 update goes at 5")
    func carried() throws {
        let first = EngineHarness(policy: Self.policy())
        first.register("a", token: hexToken(1))
        first.register("b", token: hexToken(2))
        for sequence in 1...3 {
            first.submit(first.request("a", sequence: Int64(sequence), supersedable: false), partition: 1)
        }
        first.submit(first.request("b", sequence: 1), partition: 1)
        #expect(first.outcomes(4).map(\.priorityUsed) == [10, 10, 10, 10])

        // What the changelog holds: the records as written, decoded as the next owner reads them.
        let records = try first.budgets { $0.takeChanges(partitions: [1]) }.map { change in
            let (key, value) = try BudgetChangelog.record(of: change, writtenAt: first.clock.date)
            let record = try IsletJSON.decode(DispatchBudgetRecord.self, from: try #require(value))
            try record.validate()
            #expect(record.key == key)
            #expect(record.partition == 1)
            return record
        }
        #expect(Set(records.compactMap(\.activityId)) == ["a", "b"])

        let next = EngineHarness(policy: Self.policy())
        next.clock.advance(first.clock.date.timeIntervalSince(next.clock.date))
        next.register("a", token: hexToken(1))
        next.register("b", token: hexToken(2))
        for record in records { next.budgets { $0.restore(record, now: next.clock.date) } }
        next.submit(next.request("a", sequence: 4), partition: 1)
        next.submit(next.request("b", sequence: 2), partition: 1)
        let outcomes = next.outcomes(2)
        #expect(outcomes.first { $0.activityId == "a" }?.result == .deliveredDowngraded, "a spent its 3 on the first instance")
        #expect(outcomes.first { $0.activityId == "a" }?.priorityUsed == 5)
        #expect(outcomes.first { $0.activityId == "b" }?.priorityUsed == 10, "b has 2 left")

        // Without the changelog the same update would have gone at 10: what the changelog prevents.
        let fresh = EngineHarness(policy: Self.policy())
        fresh.register("a", token: hexToken(1))
        fresh.submit(fresh.request("a", sequence: 4), partition: 1)
        #expect(fresh.outcomes(1).first?.priorityUsed == 10)
    }

    @Test("a budget is held in 24 bytes and gives back what it was made with")
    func compact() {
        #expect(MemoryLayout<Budget>.stride == 24)
        let limits = BudgetPolicy.Limits(capacity: 240, period: .seconds(3_600))
        var budget = Budget(limits: limits, available: 17.25, updatedAt: Self.now)
        #expect(budget.limits == limits)
        #expect(budget.available == 17.25)
        #expect(budget.updatedAt == Self.now)
        let took = budget.take(now: Self.now.addingTimeInterval(15))  // +1 refilled, −1 spent
        #expect(took)
        #expect(abs(budget.available - 17.25) < 1e-9)
        #expect(Budget(limits: .init(capacity: 8, period: .milliseconds(480_500)), now: Self.now).limits.period == .milliseconds(480_500))
    }

    @Test("a device's push-to-start budget is written under its device, in the partition of the request that spent it")
    func deviceRecord() throws {
        let budget = Budget(limits: .init(capacity: 8, period: .seconds(480)), available: 6.5, updatedAt: Self.now)
        let change = BudgetBook.Change(key: .device("com.example.food:5C3F2A10"), partition: 5, budget: budget)
        let (key, value) = try BudgetChangelog.record(of: change, writtenAt: Self.now)
        #expect(key == "com.example.food:5C3F2A10")
        let record = try IsletJSON.decode(DispatchBudgetRecord.self, from: try #require(value))
        #expect(record.deviceId == "5C3F2A10")
        #expect(record.bundleId == "com.example.food")
        #expect(record.activityId == nil)
        #expect(record.key == key)
        var book = BudgetBook()
        book.restore(record, now: Self.now)
        #expect(book.deviceCount == 1)
        let tombstone = try BudgetChangelog.record(of: .init(key: change.key, partition: 5, budget: nil), writtenAt: Self.now)
        #expect(tombstone.key == key && tombstone.value == nil)
    }
}

@Suite("apns-dispatcher's settings: the budgets' changelog interval")
struct DispatcherBudgetSettingsTests {
    static func settings(_ extra: [String: String]) throws -> DispatcherSettings {
        let file = FileManager.default.temporaryDirectory.appendingPathComponent("AuthKey-\(UUID().uuidString).p8")
        try P256.Signing.PrivateKey().pemRepresentation.write(to: file, atomically: true, encoding: .utf8)
        defer { try? FileManager.default.removeItem(at: file) }
        return try DispatcherSettings(
            from: .variables(["ISLET_APNS_KEYS": "TEAM123456=KEY1234567:\(file.path)", "ISLET_APNS_APPS": "com.example.food=TEAM123456"].merging(extra) { $1 }))
    }

    @Test("5 s unless ISLET_DISPATCHER_BUDGETS_INTERVAL_MS says otherwise; under 100 ms refused, naming the variable")
    func interval() throws {
        #expect(try Self.settings([:]).budgetsInterval == .seconds(5))
        #expect(try Self.settings(["ISLET_DISPATCHER_BUDGETS_INTERVAL_MS": "1000"]).budgetsInterval == .seconds(1))
        #expect {
            try Self.settings(["ISLET_DISPATCHER_BUDGETS_INTERVAL_MS": "50"])
        } throws: { error in
            "\(error)".contains("ISLET_DISPATCHER_BUDGETS_INTERVAL_MS") && "\(error)".contains("at least 100")
        }
    }
}
