import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import APNsDispatcher
import NIOCore

/// What a partition's next owner is told, and what it does with it: the bugs the simulation found
/// (Tests/SimulationTests; issue 57), each held here by a test that fails on the code before its fix.
@Suite("A partition's next owner: what it is told and what it does", .timeLimit(.minutes(1)))
struct HandOffTests {
    /// The outcomes the sink holds, read as the partition's next owner reads them.
    func read(_ outcomes: [PushOutcome]) -> RecentOutcomes.Ids {
        var ids = RecentOutcomes.Ids()
        for outcome in outcomes { ids.add(outcome) }
        return ids
    }

    @Test("every assignment of a partition reads its recent outcomes, also one revoked and assigned back (seeds 2 and 162: a second activity)")
    func everyAssignmentIsChecked() {
        var partitions = RequestPartitions()
        partitions.assigned([0, 1])
        let first = partitions.takeCheck(0)
        let again = partitions.takeCheck(0)
        #expect(first)
        #expect(!again, "once per assignment")
        partitions.revoked([0, 1])
        partitions.assigned([0, 1])
        let back = partitions.takeCheck(0)
        let unread = partitions.takeCheck(1)
        #expect(back, "assigned back: another instance may have had it meanwhile")
        #expect(unread, "assigned back before a record of it was read")
    }

    @Test("a push-to-start APNs answered 429 says so (retrying) before its retry: the next owner sends it, once, instead of failing it (seed 7: a start that never appears)")
    func refusedStartIsHandedOn() {
        let h = EngineHarness()
        let key = h.registerPushToStart(token: hexToken(7))
        let request = h.pushToStart(key: key, sequence: 0)
        h.sender.script(hexToken(7), [APNsAnswer(status: 429, reason: "TooManyRequests")])
        h.hold()
        h.submit(request)
        h.release()
        #expect(h.sink.all.map(\.result) == [.sending, .retrying], "the retrying note is persisted before the retry waits")

        // The partition moves now (the retry waits for its backoff): the next owner reads the outcomes.
        let next = EngineHarness()
        _ = next.registerPushToStart(token: hexToken(7))
        next.alreadyFinished(read(h.sink.all))
        next.submit(request)
        next.outcomes(1)
        #expect(next.sink.final.map(\.result) == [.delivered])
        #expect(next.sender.sent.count == 1)
        #expect(next.sink.all.map(\.result) == [.sending, .delivered], "announced again before its send")

        // Had it been announced and not answered (a crash), the next owner would not send it.
        let crashed = EngineHarness()
        _ = crashed.registerPushToStart(token: hexToken(7))
        crashed.alreadyFinished(read([h.sink.all[0]]))
        crashed.submit(request)
        #expect(crashed.outcomes(1).map(\.result) == [.failed])
        #expect(crashed.sender.sent.isEmpty)
    }

    @Test("a copy read while its push-to-start is in flight here joins it, even when the topic says it may have been delivered (it was: by this very send)")
    func copyJoinsBeforeTheTopicIsLookedAt() {
        let h = EngineHarness()
        let key = h.registerPushToStart(token: hexToken(7))
        let request = h.pushToStart(key: key, sequence: 0)
        h.hold()
        h.submit(request)
        // The partition was lost and assigned back: the outcomes read show this send's announcement.
        h.alreadyFinished(read(h.sink.all))
        h.submit(request)
        h.release()
        #expect(h.outcomes(1).map(\.result) == [.delivered], "one outcome, not failed and delivered")
        #expect(h.sink.final.count == 1)
        #expect(h.sender.sent.count == 1)
    }

    @Test("an update older than content already sent to the activity is not sent after it: here, and at the partition's next owner (seeds 40 and 80: older content after newer)")
    func olderContentIsNotSentAfterNewer() {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        let older = h.request("a", sequence: 1)
        let newer = h.request("a", sequence: 2)
        h.submit(newer)
        h.outcomes(1)
        // The older one reaches the topic late (content-service sent it again after a refusal).
        h.submit(older)
        let outcomes = h.outcomes(2)
        #expect(outcomes.last?.result == .coalesced)
        #expect(outcomes.last?.supersededBy == newer.requestId)
        #expect(h.sender.sent.map(\.apnsID) == [newer.requestId])

        // The next owner learns the newest content sent from the outcomes it reads.
        let next = EngineHarness()
        next.register("a", token: hexToken(1))
        next.alreadyFinished(read([outcomes[0]]))
        next.submit(older)
        #expect(next.outcomes(1).map(\.result) == [.coalesced])
        #expect(next.sender.sent.isEmpty)
    }

    @Test("a push with an alert is announced before it is sent: after a crash the next owner sends it without its alert (seed 179: an alert twice)")
    func alertingPushIsAnnounced() {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        let alerting = h.request("a", sequence: 1, supersedable: false, alerting: true)
        h.hold()
        h.submit(alerting)
        #expect(h.sink.all.map(\.result) == [.sending], "announced before the send")
        #expect(String(buffer: h.sender.sent[0].payload).contains("alert"))

        // The dispatcher dies with it in flight; the next owner reads the announcement.
        let next = EngineHarness()
        next.register("a", token: hexToken(1))
        next.alreadyFinished(read(h.sink.all))
        next.submit(alerting)
        #expect(next.outcomes(1).map(\.result) == [.delivered])
        #expect(next.sender.sent.count == 1)
        #expect(!String(buffer: next.sender.sent[0].payload).contains("alert"), "sent again without its alert")
        #expect(!next.sink.all.contains { $0.result == .sending }, "not announced again: its alert is gone")
    }

    @Test("a push with an alert APNs answered 429 says so (retrying): the next owner sends it with its alert, announced again")
    func refusedAlertIsHandedOn() {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        let alerting = h.request("a", sequence: 1, supersedable: false, alerting: true)
        h.sender.script(hexToken(1), [APNsAnswer(status: 429, reason: "TooManyRequests")])
        h.submit(alerting)
        #expect(h.sink.all.map(\.result) == [.sending, .retrying])
        h.until { h.sink.final.count == 1 }
        #expect(h.sink.all.map(\.result) == [.sending, .retrying, .sending, .delivered])
        #expect(h.sender.sent.allSatisfy { String(buffer: $0.payload).contains("alert") }, "APNs took neither attempt before the last: the alert stays")

        let next = EngineHarness()
        next.register("a", token: hexToken(1))
        next.alreadyFinished(read(Array(h.sink.all.prefix(2))))
        next.submit(alerting)
        next.outcomes(1)
        #expect(String(buffer: next.sender.sent[0].payload).contains("alert"))
    }

    @Test("an answer for a partition given up (lost) ends the attempt without a retry and without an outcome; a copy read since it came back takes its place (seed 1504: a request left without an outcome)")
    func givenUpPartitionIsNotRetried() {
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        h.own([0])
        let update = h.request("a", sequence: 1)
        h.sender.script(hexToken(1), [APNsAnswer(status: 503, reason: "ServiceUnavailable")])
        h.hold()
        h.submit(update, partition: 0)
        h.disown([0])
        h.release()
        h.advance(120)
        #expect(h.sink.final.isEmpty, "the partition's next owner gives it its outcome")
        #expect(h.sender.sent.count == 1, "not retried")
        #expect(h.done.isEmpty)

        // Lost with the attempt in flight, assigned back, read again: the copy is sent.
        let g = EngineHarness()
        g.register("a", token: hexToken(1))
        g.own([0])
        g.sender.script(hexToken(1), [APNsAnswer(status: 503, reason: "ServiceUnavailable")])
        g.hold()
        g.submit(update, partition: 0)  // ticket 1
        g.disown([0])
        g.own([0])
        g.submit(update, partition: 0)  // ticket 2: joins the attempt in flight
        g.release()
        g.until { g.sink.final.count == 1 }
        #expect(g.sink.final.map(\.result) == [.delivered])
        #expect(g.done == [2], "the copy of this assignment is done; the first ticket's assignment is over")
    }

    @Test("a request of a partition not assigned (a submit that waited for room while it was revoked) is not taken")
    func notOwnedIsRefused() {
        var machine = EngineHarness().machine
        machine.own([0])
        #expect(machine.owns(Int32(0)))
        #expect(!machine.owns(Int32(1)))
        machine.disown([0])
        #expect(!machine.owns(Int32(0)))
        #expect(machine.owns(nil as Int32?), "a request of no partition (tests) is always taken")
    }

    @Test("a payload without its alert is written as content-service writes it: slashes not escaped, never longer than the payload")
    func withoutAlertEscapesNothing() {
        let link = "https://links.example.com/a/b?x=1"
        let payload = #"{"aps":{"alert":{"body":"On the way","title":"Order"},"content-state":{"link":"\#(link)"},"event":"update","sound":"default","timestamp":1795000000}}"#
        let stripped = DispatchEngine.withoutAlert(payload)
        #expect(stripped.contains(link))
        #expect(!stripped.contains("alert"))
        #expect(!stripped.contains("sound"))
        #expect(stripped.utf8.count < payload.utf8.count)
        #expect(!stripped.contains(#"\/"#))
    }

    @Test("a retrying takes back only the announcement it names: an earlier owner's late one leaves a later owner's announcement standing (review of issue 57: a second activity)")
    func retryingNamesItsAnnouncement() {
        let now = Date(timeIntervalSince1970: 1_795_000_000)
        func record(_ result: PushResult, _ id: String?) -> PushOutcome {
            PushOutcome(requestId: "r", pushToStartKey: "pts:a:d:T", result: result, attempts: 1, completedAt: now, announcementId: id)
        }
        #expect(read([record(.sending, "A"), record(.sending, "B"), record(.retrying, "A")]).maybeDelivered == ["r"], "B's stands")
        #expect(read([record(.sending, "A"), record(.retrying, "A")]).maybeDelivered.isEmpty)
        #expect(read([record(.sending, "A"), record(.sending, "A")]).announcements["r"] == ["A"], "a copy of one record is one announcement")
        #expect(read([record(.sending, nil), record(.retrying, nil)]).maybeDelivered.isEmpty, "records from before announcement ids")
    }

    @Test("an announced attempt whose partition was given up before it went is taken back (retrying, naming it) and not sent; its ticket is left to the next owner")
    func withdrawnAnnouncement() {
        let h = EngineHarness()
        let key = h.registerPushToStart(token: hexToken(7))
        h.own([0])
        let request = h.pushToStart(key: key, sequence: 0)
        // The send is handed out and announced; the partition is lost before it goes.
        h.hold()
        h.submit(request, partition: 0)
        let attempt = h.takeHeld()
        h.disown([0])
        h.withdraw(attempt, announced: true)
        #expect(h.sink.all.map(\.result) == [.sending, .retrying])
        #expect(h.sink.all[0].announcementId != nil && h.sink.all[0].announcementId == h.sink.all[1].announcementId)
        #expect(h.abandoned == [1])
        #expect(read(h.sink.all).maybeDelivered.isEmpty, "the next owner sends it")
    }

    @Test("a copy that takes the place of a request of a partition given up is checked as a request read: what the topic said of it holds (a start announced elsewhere is not sent)")
    func promotedCopyIsChecked() {
        let h = EngineHarness()
        let key = h.registerPushToStart(token: hexToken(7))
        h.own([0])
        let request = h.pushToStart(key: key, sequence: 0)
        h.sender.script(hexToken(7), [APNsAnswer(status: 503, reason: "ServiceUnavailable")])
        h.hold()
        h.submit(request, partition: 0)  // ticket 1, in flight (announced)
        h.disown([0])
        h.own([0])
        // Read again under the new assignment: the outcomes showed another owner's announcement.
        var elsewhere = RecentOutcomes.Ids()
        elsewhere.add(PushOutcome(requestId: request.requestId, pushToStartKey: key, result: .sending, attempts: 1, completedAt: h.clock.date, announcementId: "other"))
        h.alreadyFinished(elsewhere, partition: 0)
        h.submit(request, partition: 0)  // ticket 2: joins the attempt in flight
        h.release()
        h.until { h.sink.final.count == 1 }
        #expect(h.sink.final.map(\.result) == [.failed], "another owner's announcement stands: not sent again")
        #expect(h.sender.sent.count == 1)
        #expect(h.abandoned == [1])
        #expect(h.done == [2])
    }

    @Test("a copy of a push-to-start content-service wrote again minutes later is not sent again, however many requests finished meanwhile (seed 4259: a second activity)")
    func lateCopyOfAStart() {
        var policy = DispatcherPolicy()
        policy.rememberedFinished = 4
        policy.rememberedFinishedPerActivity = 0
        let h = EngineHarness(policy: policy)
        let key = h.registerPushToStart(token: hexToken(7))
        let request = h.pushToStart(key: key, sequence: 0)
        h.submit(request)
        h.outcomes(1)
        h.register("a", token: hexToken(1))
        for sequence in 1...20 { h.submit(h.request("a", sequence: Int64(sequence))) }
        h.advance(300)
        h.submit(request)  // the copy, five minutes and twenty requests later
        #expect(h.sender.sent.filter { $0.apnsID == request.requestId }.count == 1)
        #expect(h.sink.final.filter { $0.requestId == request.requestId }.count == 1)
    }

    @Test("a copy of an update content-service wrote again is released, however many requests of other activities finished meanwhile (seed 15311: a second outcome)")
    func lateCopyOfAnUpdate() {
        var policy = DispatcherPolicy()
        policy.rememberedFinished = 4
        let h = EngineHarness(policy: policy)
        let request = h.request("a", sequence: 5)
        h.submit(request)  // no token yet: it waits, then gives up
        h.submit(h.request("a", sequence: 6))  // and coalesces it
        #expect(h.sink.final.map(\.requestId) == [request.requestId])
        for (index, activity) in ["b", "c", "d", "e", "f", "g"].enumerated() {
            h.register(activity, token: hexToken(index + 1))
            h.submit(h.request(activity, sequence: 1))
        }
        h.advance(120)
        h.submit(request)  // the copy, after seven finished requests and two minutes
        h.advance(300)
        #expect(h.sink.final.filter { $0.requestId == request.requestId }.count == 1, "one outcome")
        #expect(h.sink.final.count == 8, "the six others' and a's two")
    }

    @Test("the requests finished by activity are forgotten after the horizon and beyond the activities kept")
    func finishedRequestsAreBounded() {
        let now = Date(timeIntervalSince1970: 1_795_000_000)
        var finished = FinishedRequests(perActivity: 2, maximumActivities: 3, horizon: 600)
        for id in ["1", "2", "3"] { finished.insert(id, key: "a", now: now) }
        #expect(!finished.contains("1", key: "a", now: now), "two kept per activity")
        #expect(finished.contains("2", key: "a", now: now) && finished.contains("3", key: "a", now: now))
        #expect(!finished.contains("3", key: "b", now: now), "by activity")
        for (index, key) in ["b", "c", "d"].enumerated() { finished.insert("x", key: key, now: now.addingTimeInterval(Double(index + 1))) }
        #expect(finished.count == 3)
        #expect(!finished.contains("3", key: "a", now: now), "the activity that finished longest ago is forgotten first")
        #expect(!finished.contains("x", key: "b", now: now.addingTimeInterval(602)), "past the horizon")
        finished.insert("y", key: "e", now: now.addingTimeInterval(700))
        #expect(finished.count == 1, "the expired are forgotten")
        // Each id for the horizon after its own outcome, however busy its activity stays.
        finished.insert("1", key: "e", now: now.addingTimeInterval(800))
        #expect(finished.contains("y", key: "e", now: now.addingTimeInterval(1_300)) && !finished.contains("y", key: "e", now: now.addingTimeInterval(1_301)))
        #expect(finished.contains("1", key: "e", now: now.addingTimeInterval(1_301)))
        var off = FinishedRequests(perActivity: 0, maximumActivities: 3, horizon: 600)
        off.insert("1", key: "a", now: now)
        #expect(!off.contains("1", key: "a", now: now) && off.count == 0, "0 keeps nothing")
    }

    @Test("the newest content sent is remembered for as many activities as configured, however often each is raised")
    func floorsCountActivities() {
        var policy = DispatcherPolicy()
        policy.rememberedFloors = 3
        let h = EngineHarness(policy: policy)
        for (index, activity) in ["a", "b", "c"].enumerated() { h.register(activity, token: hexToken(index + 1)) }
        for sequence in 1...50 {
            for activity in ["a", "b", "c"] { h.submit(h.request(activity, sequence: Int64(sequence))) }
        }
        #expect(h.machine.floors.count == 3)
        #expect(h.machine.floors["com.example.food/a"]?.sequence == 50)
        h.submit(h.request("a", sequence: 7))
        #expect(h.sink.final.last?.result == .coalesced, "a's floor stands after 150 raises")
    }

    /// A request stamped `timestamp` (payload and ``PushRequest/apnsTimestamp`` alike).
    private func stamped(_ h: EngineHarness, _ activity: String, _ event: ActivityEventKind = .update, sequence: Int64, timestamp: Int64) -> PushRequest {
        var request = h.request(activity, event, sequence: sequence)
        request.apnsTimestamp = timestamp
        request.payload = payload(event: event.rawValue, timestamp: timestamp, extra: #","sequence":\#(sequence)"#)
        return request
    }

    /// The `aps.timestamp` of each push sent, in order.
    private func sentTimestamps(_ h: EngineHarness) -> [Int64] {
        h.sender.sent.map { push in
            let json = try? JSONSerialization.jsonObject(with: Data(push.payload.readableBytesView)) as? [String: Any]
            return ((json?["aps"] as? [String: Any])?["timestamp"] as? NSNumber)?.int64Value ?? -1
        }
    }

    @Test("newer content stamped older than what the activity was sent goes with the newest timestamp sent; older content and equal stamps go as they are")
    func newerContentIsNeverStampedOlder() throws {
        // Seed 10099: the next owner of a content-service partition wrote #6 at t41; requests the
        // stopped instance had stamped t31 (#6–#8) were stored after it.
        let h = EngineHarness()
        h.register("a", token: hexToken(1))
        let sixAgain = stamped(h, "a", sequence: 6, timestamp: 1_795_000_041)
        h.submit(sixAgain)
        var six = stamped(h, "a", sequence: 6, timestamp: 1_795_000_031)
        six.requestId = sixAgain.requestId
        h.submit(six)
        let eight = stamped(h, "a", sequence: 8, timestamp: 1_795_000_031)
        h.submit(eight)
        #expect(sentTimestamps(h) == [1_795_000_041, 1_795_000_041], "#8 goes with t41, not t31, which the phone would ignore")
        let outcomes = h.outcomes(2)
        #expect(outcomes.count == 2, "the copy of a finished request gets none")
        let delivered = try #require(outcomes.first { $0.requestId == eight.requestId })
        #expect(delivered.result == .delivered && delivered.apnsTimestamp == 1_795_000_041, "the outcome says which timestamp went")
        #expect(outcomes.first { $0.requestId == sixAgain.requestId }?.apnsTimestamp == 1_795_000_041)
        // Older content is still held back (not restamped to overtake newer); an end stamped
        // older goes with the newest timestamp; an equal stamp is not older.
        h.submit(stamped(h, "a", sequence: 7, timestamp: 1_795_000_050))
        #expect(h.sink.final.last?.result == .coalesced)
        h.submit(stamped(h, "a", sequence: 9, timestamp: 1_795_000_041))
        h.submit(stamped(h, "a", .end, sequence: 9, timestamp: 1_795_000_035))
        #expect(sentTimestamps(h).suffix(2) == [1_795_000_041, 1_795_000_041])
        // An end of content older than what was sent (an earlier life of the id) is not restamped:
        // iOS may ignore it, as it would.
        let stale = EngineHarness()
        stale.register("c", token: hexToken(3))
        stale.submit(stamped(stale, "c", sequence: 5, timestamp: 1_795_000_050))
        stale.submit(stamped(stale, "c", .end, sequence: 3, timestamp: 1_795_000_040))
        #expect(sentTimestamps(stale) == [1_795_000_050, 1_795_000_040])
        // Retried (APNs answered 503), a restamped request keeps its new timestamp.
        let other = EngineHarness()
        other.register("b", token: hexToken(2))
        other.submit(stamped(other, "b", sequence: 2, timestamp: 1_795_000_060))
        other.sender.script(hexToken(2), [APNsAnswer(status: 503, reason: "ServiceUnavailable")])
        other.submit(stamped(other, "b", sequence: 3, timestamp: 1_795_000_040))
        other.until { other.sender.sent.count == 3 }
        #expect(sentTimestamps(other) == [1_795_000_060, 1_795_000_060, 1_795_000_060])
        #expect(other.sink.final.last?.result == .delivered && other.sink.final.last?.apnsTimestamp == 1_795_000_060)
    }

    @Test("the next owner of a dispatcher partition takes the newest timestamp sent from the outcomes it reads, and restamps newer content older than it")
    func timestampFloorCrossesAHandOff() throws {
        let now = Date(timeIntervalSince1970: 1_795_000_000)
        func outcome(_ id: String, _ result: PushResult, sequence: Int64, timestamp: Int64?, attempts: Int = 1) -> PushOutcome {
            PushOutcome(
                requestId: id, activityId: "a", result: result, attempts: attempts, completedAt: now, bundleId: "com.example.food",
                contentSequence: sequence, apnsTimestamp: timestamp)
        }
        let ids = read([
            outcome("1", .delivered, sequence: 6, timestamp: 1_795_000_041), outcome("2", .delivered, sequence: 5, timestamp: 1_795_000_045),
            outcome("3", .coalesced, sequence: 9, timestamp: nil, attempts: 0), outcome("4", .delivered, sequence: 4, timestamp: nil),
        ])
        #expect(ids.floors["com.example.food/a"] == RecentOutcomes.Floor(sequence: 6, requestId: "1", timestamp: 1_795_000_045))
        let h = EngineHarness()
        h.own([0])
        h.alreadyFinished(ids, partition: 0)
        h.register("a", token: hexToken(1))
        h.submit(stamped(h, "a", sequence: 8, timestamp: 1_795_000_031), partition: 0)
        #expect(sentTimestamps(h) == [1_795_000_045])
        #expect(h.machine.floors["com.example.food/a"]?.timestamp == 1_795_000_045)
    }

    @Test("a restamped payload's stale-date is raised to its new timestamp when it was earlier, and left alone when it was later; nothing else in it changes")
    func restampKeepsStaleDateAtOrAfterTimestamp() throws {
        func aps(_ text: String?) throws -> [String: JSONValue] {
            guard case .object(let root)? = JSONReader.value(of: Array(try #require(text).utf8)), case .object(let aps)? = root["aps"] else {
                Issue.record("no aps in \(text ?? "nil")")
                return [:]
            }
            return aps
        }
        let early = #"{"aps":{"event":"update","timestamp":1795000031,"stale-date":1795000041,"content-state":{"eta":5}}}"#
        let raised = try aps(DispatchEngine.restamped(early, timestamp: 1_795_000_045))
        #expect(raised["timestamp"] == .integer(1_795_000_045) && raised["stale-date"] == .integer(1_795_000_045))
        #expect(raised["content-state"] == .object(["eta": .integer(5)]) && raised["event"] == .string("update"))
        let later = try aps(DispatchEngine.restamped(early, timestamp: 1_795_000_035))
        #expect(later["timestamp"] == .integer(1_795_000_035) && later["stale-date"] == .integer(1_795_000_041))
        let none = try aps(DispatchEngine.restamped(#"{"aps":{"event":"end","timestamp":1}}"#, timestamp: 9))
        #expect(none["stale-date"] == nil && none["timestamp"] == .integer(9))
    }

    @Test("the outcomes read: a final outcome ends a request's records; retrying takes back a sending; delivered and sent content raise the activity's floor")
    func readingTheOutcomes() {
        let now = Date(timeIntervalSince1970: 1_795_000_000)
        func outcome(_ id: String, _ result: PushResult, sequence: Int64? = nil, attempts: Int = 1) -> PushOutcome {
            PushOutcome(
                requestId: id, activityId: "a", result: result, attempts: attempts, completedAt: now, bundleId: "com.example.food",
                contentSequence: sequence)
        }
        let ids = read([
            outcome("1", .sending), outcome("1", .delivered, sequence: 3), outcome("2", .sending), outcome("3", .sending), outcome("3", .retrying),
            outcome("4", .coalesced, sequence: 9, attempts: 0), outcome("5", .failed, sequence: 7, attempts: 0),
        ])
        #expect(ids.finished == ["1", "4", "5"])
        #expect(ids.maybeDelivered == ["2"])
        #expect(ids.floors["com.example.food/a"]?.sequence == 3, "never sent content (coalesced, failed before a send) is no floor")
    }
}
