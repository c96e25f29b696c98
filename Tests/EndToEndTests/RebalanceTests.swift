import Foundation
import IsletMessages
import Testing

/// Size of the rebalance run (smaller than the crash run's: it only has to keep events flowing
/// through two rebalances of each group).
private let rebalanceEvents = ProcessInfo.processInfo.environment["ISLET_E2E_REBALANCE_EVENTS"].flatMap(Int.init) ?? 6_000
private let rebalanceActivities = ProcessInfo.processInfo.environment["ISLET_E2E_REBALANCE_ACTIVITIES"].flatMap(Int.init) ?? 600

extension EndToEnd {
    @Suite("End to end: rebalance under load", .timeLimit(.minutes(10)))
    struct RebalanceTests {
        @Test("a second content-service and a second apns-dispatcher join while events flow, then the first of each stops with SIGTERM: no push sent twice, no push-to-start twice, no request written twice, nothing lost")
        func joinAndLeave() async throws {
            let stack = try Stack(name: "rebalance")
            try await stack.start()
            let driver = try Driver(stack: stack)
            let joiners = [stack.another(.content, instance: "b"), stack.another(.dispatcher, instance: "b")]
            do {
                let stops = Stops()
                let workload = Workload(stack: stack, driver: driver, events: rebalanceEvents, activities: rebalanceActivities)
                let report = try await workload.run {
                    // Under load, each group gets a second member: partitions move to it.
                    try await stack.waitForPushes(50, within: .seconds(90), publishing: workload.publishing)
                    for joiner in joiners {
                        try await joiner.start()
                        print("rebalance: a second \(joiner.name.rawValue) joined (pid \(joiner.pid ?? -1))")
                    }
                    // Both members work; then the first of each leaves: its partitions move again.
                    try await stack.waitForPushes(100, within: .seconds(90), publishing: workload.publishing)
                    for victim in [ServiceProcess.Name.content, .dispatcher] {
                        let (took, status) = await stack[victim].terminate(within: .seconds(30))
                        print("rebalance: the first \(victim.rawValue) exited \(status.map(String.init) ?? "— killed") after \(took)")
                        stops.record(victim, took, status)
                    }
                    try await stack.waitForPushes(50, within: .seconds(90), publishing: workload.publishing)
                }
                for (victim, took, status) in stops.all {
                    #expect(status == 0, "\(victim.rawValue) exited with \(status.map(String.init) ?? "nothing: it was killed") after \(took)")
                }
                let ledger = report.ledger
                print("rebalance: \(ledger.requests.count) requests, outcomes \(ledger.results.map { "\($0.key.rawValue) \($0.value)" }.sorted()); \(report.received.count) pushes at the simulator, \(report.duplicates.count) received twice")
                #expect(ledger.violations.isEmpty, "\(ledger.violations.prefix(20)) (\(ledger.violations.count) in all)")
                #expect(report.missingEvents.isEmpty, "events without a push request: \(report.missingEvents.prefix(20)) (\(report.missingEvents.count))")
                // A partition that moves finishes its work first: nothing is done twice.
                let copies = ledger.requestCopies.values.filter { $0 > 1 }.count
                #expect(copies == 0, "content-service wrote \(copies) requests twice")
                #expect(report.duplicates.isEmpty, "pushes received twice: \(report.duplicates.count)")
                #expect(report.startedTwice.isEmpty, "push-to-start sent twice to \(report.startedTwice.map { $0.prefix(8) })")
                #expect(report.taps.accepted.isSubset(of: report.clicks), "accepted taps missing on the clicks topic: \(report.taps.accepted.subtracting(report.clicks).count)")
            } catch {
                Issue.record(error)
            }
            for joiner in joiners { _ = await joiner.terminate(within: .seconds(15)) }
            await driver.close()
            await stack.stop()
        }
    }
}
