import Foundation
import IsletMessages
import IsletTesting
import Testing
@testable import APNsDispatcher

@Suite("The send window: how many pushes wait for APNs at once", .timeLimit(.minutes(1)))
struct SendWindowTests {
    private func policy(initial: Int, minimum: Int = 2, maximum: Int = 64) -> DispatcherPolicy {
        var policy = DispatcherPolicy()
        policy.initialInFlight = initial
        policy.minimumInFlight = minimum
        policy.maximumInFlight = maximum
        policy.slowAnswer = .seconds(2)
        return policy
    }

    @Test("quick answers double it per round trip up to the maximum; a slow answer or none halves it, once per slow-answer time, not below the minimum")
    func additiveIncreaseMultiplicativeDecrease() {
        let start = Date(timeIntervalSince1970: 1_795_000_000)
        var window = SendWindow(policy: policy(initial: 8))
        #expect(window.limit == 8)
        for _ in 0..<8 { window.answered(after: 0.05, now: start) }
        #expect(window.limit == 16, "one per quick answer: a round trip doubles it")
        for _ in 0..<100 { window.answered(after: 0.05, now: start) }
        #expect(window.limit == 64, "never above the maximum")

        window.answered(after: 2.5, now: start)
        #expect(window.limit == 32)
        window.answered(after: 2.5, now: start.addingTimeInterval(1))
        window.unanswered(now: start.addingTimeInterval(1.5))
        #expect(window.limit == 32, "one slow wave halves it once")
        window.unanswered(now: start.addingTimeInterval(2))
        #expect(window.limit == 16)

        // Past the size it last shrank to, it grows by one per window's worth of quick answers.
        for _ in 0..<16 { window.answered(after: 0.05, now: start.addingTimeInterval(3)) }
        #expect(window.limit == 16)
        window.answered(after: 0.05, now: start.addingTimeInterval(3))
        #expect(window.limit == 17, "1/16 per answer, a little less as it grows: 17 answers make one more")
        for step in 0..<20 { window.unanswered(now: start.addingTimeInterval(10 + Double(step) * 2)) }
        #expect(window.limit == 2, "never below the minimum")
    }

    @Test("the settings are kept within each other: an initial size past the maximum starts at the maximum")
    func bounds() {
        #expect(SendWindow(policy: policy(initial: 500, maximum: 100)).limit == 100)
        #expect(SendWindow(policy: policy(initial: 1, minimum: 4)).limit == 4)
        #expect(SendWindow(policy: policy(initial: 8, minimum: 50, maximum: 10)).limit == 10)
    }

    @Test("a slow APNs: the machine sends no more than the window, which halves when answers are slow, and the rest wait in their activities' queues; every push still goes once")
    func slowServer() throws {
        let h = EngineHarness(policy: policy(initial: 8))
        for index in 0..<40 { h.register("a\(index)", token: hexToken(index + 1)) }
        h.hold()
        for index in 0..<40 { h.submit(h.request("a\(index)", sequence: 1, priority: 5)) }
        #expect(h.heldCount == 8)

        h.release(after: 0.05, holdingOn: true)
        #expect(h.heldCount == 16, "8 quick answers: the window doubled")

        h.release(after: 3, holdingOn: true)
        #expect(h.heldCount == 8, "slow answers: the window halved, once")

        h.advance(3)
        h.release(after: 3, holdingOn: true)
        #expect(h.heldCount == 4, "slow again, later: halved again")
        #expect(h.machine.window.limit == 4)

        h.release()
        let outcomes = h.outcomes(40)
        #expect(outcomes.allSatisfy { $0.result == .delivered })
        #expect(Set(outcomes.map(\.requestId)).count == 40)
        #expect(h.sender.sent.count == 40, "none sent twice")
    }
}
