import Foundation
import IsletMessages
import IsletTesting
import NIOCore
import Testing
@testable import APNsDispatcher

extension EngineHarness {
    /// A broadcast to `activity`'s channel (`storagePolicy` 0: no message stored).
    func broadcastRequest(
        _ activity: String, _ event: ActivityEventKind = .update, sequence: Int64, priority: Int = 10, storagePolicy: Int = 0, supersedable: Bool? = nil
    ) -> PushRequest {
        var request = request(activity, event, sequence: sequence, priority: priority, supersedable: supersedable)
        request.channelStoragePolicy = storagePolicy
        return request
    }
}

@Suite("Broadcasts in the dispatch engine: one channel per activity, made once, reused, deleted after the end", .timeLimit(.minutes(1)))
struct BroadcastEngineTests {
    @Test("the first broadcast makes the activity's channel; the next reuse it; no token is needed; the outcome names the channel")
    func channelMadeOnceAndReused() throws {
        let h = EngineHarness()
        let first = h.broadcastRequest("match-7", sequence: 1)
        h.submit(first)
        #expect(h.channelsMade.count == 1)
        let channel = try #require(h.sink.channels.first)
        #expect(channel.activityId == "match-7" && channel.storagePolicy == 0 && channel.app.bundleId == "com.example.food")
        let sent = try #require(h.sender.sent.first)
        #expect(sent.destination == .channel(id: channel.channelId, bundleID: "com.example.food"))
        #expect(sent.expiration == 0, "a channel that stores nothing takes no expiration")
        h.submit(h.broadcastRequest("match-7", sequence: 2))
        let outcomes = h.outcomes(2)
        #expect(h.channelsMade.count == 1, "reused")
        #expect(outcomes.allSatisfy { $0.result == .delivered && $0.channelId == channel.channelId && $0.tokenFingerprint == nil })
        #expect(h.sender.sent.map(\.recipient) == [channel.channelId, channel.channelId])
    }

    @Test("newer content coalesces a waiting broadcast per channel; its priority-10 budget is the channel's (the larger one for a channel that stores nothing)")
    func coalescingAndBudgetPerChannel() throws {
        let h = EngineHarness()
        h.hold()
        h.submit(h.broadcastRequest("match-7", sequence: 1))
        let stale = h.broadcastRequest("match-7", sequence: 2)
        h.submit(stale)
        let newest = h.broadcastRequest("match-7", sequence: 3)
        h.submit(newest)
        h.release()
        let outcomes = h.outcomes(3)
        #expect(outcomes.first { $0.requestId == stale.requestId }?.result == .coalesced)
        #expect(outcomes.first { $0.requestId == stale.requestId }?.supersededBy == newest.requestId)
        #expect(h.sender.sent.count == 2)

        // 240 an hour on a channel that stores nothing, 12 on one that keeps the latest message.
        for i in 4...30 { h.submit(h.broadcastRequest("match-7", sequence: Int64(i))) }
        #expect(h.sender.sent.allSatisfy { $0.priority == 10 })
        for i in 1...14 { h.submit(h.broadcastRequest("match-8", sequence: Int64(i), storagePolicy: 1)) }
        let stored = h.sender.sent.filter { $0.recipient != h.channelsMade[0] }
        #expect(stored.filter { $0.priority == 10 }.count == 12 && stored.filter { $0.priority == 5 }.count == 2)
    }

    @Test("after the end is delivered the record says when the channel goes; it is deleted then (not before), the deletion is recorded, and an update after the end is not sent")
    func deletedAfterTheEnd() throws {
        let h = EngineHarness()
        h.submit(h.broadcastRequest("match-7", sequence: 1))
        h.submit(h.broadcastRequest("match-7", .end, sequence: 2))
        h.outcomes(2)
        let ended = try #require(h.sink.channels.last)
        #expect(ended.endedAt == h.clock.date && ended.deleteAt == h.clock.date.addingTimeInterval(4 * 3_600) && ended.deletedAt == nil)
        let late = h.broadcastRequest("match-7", sequence: 3)
        h.submit(late)
        #expect(h.outcomes(3).last?.result == .expired)
        h.advance(4 * 3_600 - 1)
        #expect(h.channelsDeleted.isEmpty)
        h.advance(1)
        #expect(h.channelsDeleted == [ended.channelId])
        #expect(h.sink.channels.last?.deletedAt == h.clock.date)
        #expect(h.sender.sent.count == 2)
    }

    @Test("the end again after the end (a phone started on the channel after the end went) is sent while the channel is there, in the slot and after a restart; never once it is deleted, and never makes a channel")
    func endAgainWhileTheChannelIsThere() throws {
        let h = EngineHarness()
        h.submit(h.broadcastRequest("match-7", sequence: 1))
        h.submit(h.broadcastRequest("match-7", .end, sequence: 2))
        h.outcomes(2)
        let again = h.broadcastRequest("match-7", .end, sequence: 2)
        h.submit(again)
        #expect(h.outcomes(3).last?.result == .delivered)
        #expect(h.sender.sent.count == 3 && h.channelsMade.count == 1)

        let restarted = EngineHarness()
        var ended = try #require(h.sink.channels.last)
        (ended.endedAt, ended.deleteAt) = (restarted.clock.date, restarted.clock.date.addingTimeInterval(3_600))
        restarted.channelRecorded(ended)
        restarted.submit(restarted.broadcastRequest("match-7", .end, sequence: 2))
        #expect(restarted.outcomes(1).first?.result == .delivered)
        restarted.submit(restarted.broadcastRequest("match-7", sequence: 3))
        #expect(restarted.outcomes(2).last?.result == .expired, "an update after the end is still not sent")

        let deleted = EngineHarness()
        ended.deletedAt = deleted.clock.date
        deleted.channelRecorded(ended)
        deleted.submit(deleted.broadcastRequest("match-7", .end, sequence: 2))
        #expect(deleted.outcomes(1).first?.result == .expired)
        #expect(deleted.channelsMade.isEmpty && deleted.sender.sent.isEmpty)

        // Gone before the end (APNs said ChannelNotRegistered: deleted, never ended), or never made: an end makes none.
        let gone = EngineHarness()
        var goneRecord = try #require(h.sink.channels.first)
        goneRecord.deletedAt = gone.clock.date
        gone.channelRecorded(goneRecord)
        gone.submit(gone.broadcastRequest("match-7", .end, sequence: 2))
        gone.submit(gone.broadcastRequest("match-8", .end, sequence: 1))
        #expect(gone.outcomes(2).allSatisfy { $0.result == .expired })
        #expect(gone.channelsMade.isEmpty && gone.sender.sent.isEmpty)

        // An end behind the first broadcast while APNs makes the channel (the update coalesced
        // into it, or not): it waits for the channel, then goes.
        let making = EngineHarness()
        making.holdingChannels = true
        making.submit(making.broadcastRequest("match-9", sequence: 1))
        making.submit(making.broadcastRequest("match-9", .end, sequence: 2))
        making.makeHeldChannels()
        #expect(making.outcomes(2).last?.result == .delivered)
        #expect(making.sender.sent.last.map { String(buffer: $0.payload) }?.contains(#""event":"end""#) == true)

        // An activity sent to its token: nothing after its end, another end neither.
        let tokens = EngineHarness()
        tokens.register("order-1", token: hexToken(3))
        tokens.submit(tokens.request("order-1", sequence: 1))
        tokens.submit(tokens.request("order-1", .end, sequence: 2))
        tokens.outcomes(2)
        tokens.submit(tokens.request("order-1", .end, sequence: 2))
        #expect(tokens.outcomes(3).last?.result == .expired)
        #expect(tokens.sender.sent.count == 2)
    }

    @Test("a channel read from the topic (a partition assigned) is reused, never made again; one ended whose time came is deleted at once")
    func restoredChannels() throws {
        let h = EngineHarness()
        let now = h.clock.date
        let live = BroadcastChannelRecord(
            app: AppTarget(bundleId: "com.example.food", environment: .production), activityId: "match-7", channelId: "bGl2ZQ==", storagePolicy: 0,
            createdAt: now.addingTimeInterval(-600), writtenAt: now.addingTimeInterval(-600))
        h.channelRecorded(live)
        var over = live
        (over.activityId, over.channelId) = ("match-6", "b3Zlcg==")
        (over.endedAt, over.deleteAt) = (now.addingTimeInterval(-5 * 3_600), now.addingTimeInterval(-3_600))
        h.channelRecorded(over)
        h.advance(0.01)
        #expect(h.channelsDeleted == ["b3Zlcg=="])
        h.submit(h.broadcastRequest("match-7", sequence: 9))
        #expect(h.outcomes(1).first?.channelId == "bGl2ZQ==")
        #expect(h.channelsMade.isEmpty)
    }

    @Test("APNs refuses to make the channel (the app lacks the capability): the waiting broadcasts are rejected; no answer: they wait and it is tried again")
    func channelNotMade() throws {
        let h = EngineHarness()
        h.channelFailures = [(false, "APNs answered 400 FeatureNotEnabled")]
        h.submit(h.broadcastRequest("match-7", sequence: 1))
        let refused = try #require(h.outcomes(1).first)
        #expect(refused.result == .rejected && refused.detail?.contains("FeatureNotEnabled") == true)

        h.channelFailures = [(true, "connect: connection refused"), (true, "connect: connection refused")]
        h.submit(h.broadcastRequest("match-8", sequence: 1))
        #expect(h.sink.final.count == 1)
        h.until { h.sink.final.count == 2 }
        #expect(h.channelsMade.count == 1 && h.sink.final.last?.result == .delivered)
        #expect(h.sender.sent.count == 1)
    }

    @Test("APNs says the channel is not registered: the broadcast is rejected, the channel recorded as deleted, and the next broadcast makes a new one")
    func channelGone() throws {
        let h = EngineHarness()
        h.submit(h.broadcastRequest("match-7", sequence: 1))
        let first = h.channelsMade[0]
        h.sender.script(first, [APNsAnswer(status: 400, reason: "ChannelNotRegistered")])
        h.submit(h.broadcastRequest("match-7", sequence: 2))
        let outcomes = h.outcomes(2)
        #expect(outcomes.last?.result == .rejected && outcomes.last?.detail?.contains("ChannelNotRegistered") == true)
        #expect(h.sink.channels.last?.channelId == first && h.sink.channels.last?.deletedAt != nil)
        h.submit(h.broadcastRequest("match-7", sequence: 3))
        #expect(h.channelsMade.count == 2)
        #expect(h.outcomes(3).last?.channelId == h.channelsMade[1])
    }

    @Test("a channel whose end never comes (or is never delivered) is deleted an activity's lifetime and the delay after it was made; an update after the end, the slot gone (a restart), is not sent and makes no channel")
    func deletedAtTheLatestAndNothingAfterTheEnd() throws {
        let h = EngineHarness()
        h.submit(h.broadcastRequest("match-7", sequence: 1))
        #expect(h.sink.channels.first?.deleteAt == h.clock.date.addingTimeInterval(12 * 3_600))
        h.advance(12 * 3_600 - 1)
        #expect(h.channelsDeleted.isEmpty)
        h.advance(1)
        #expect(h.channelsDeleted == h.channelsMade)

        let restarted = EngineHarness()
        var ended = try #require(h.sink.channels.first)
        (ended.endedAt, ended.deleteAt) = (restarted.clock.date, restarted.clock.date.addingTimeInterval(3_600))
        restarted.channelRecorded(ended)
        restarted.submit(restarted.broadcastRequest("match-7", sequence: 9))
        #expect(restarted.outcomes(1).first?.result == .expired)
        #expect(restarted.channelsMade.isEmpty && restarted.sender.sent.isEmpty)
    }

    @Test("a record of an older channel read late (its own 'gone' record read back, or written by an owner the partition left) does not replace the newer channel")
    func olderChannelRecordsDoNotWin() throws {
        let h = EngineHarness()
        h.submit(h.broadcastRequest("match-7", sequence: 1))
        let first = h.channelsMade[0]
        h.sender.script(first, [APNsAnswer(status: 400, reason: "ChannelNotRegistered")])
        h.advance(1)
        h.submit(h.broadcastRequest("match-7", sequence: 2))
        let gone = try #require(h.sink.channels.last { $0.channelId == first && $0.deletedAt != nil })
        h.advance(1)
        h.submit(h.broadcastRequest("match-7", sequence: 3))
        #expect(h.channelsMade.count == 2)
        h.channelRecorded(gone)
        var original = gone
        original.deletedAt = nil
        h.channelRecorded(original)
        h.submit(h.broadcastRequest("match-7", sequence: 4))
        #expect(h.channelsMade.count == 2, "no third channel")
        #expect(h.sender.sent.last?.recipient == h.channelsMade[1])
    }

    @Test("a revocation keeps the requests of an activity whose channel APNs is making (its first broadcast goes out, the record written), then drops the rest")
    func revocationWaitsForTheChannel() throws {
        let h = EngineHarness()
        h.holdingChannels = true
        h.submit(h.broadcastRequest("match-7", sequence: 1, supersedable: false))  // ticket 1
        h.submit(h.broadcastRequest("match-7", sequence: 2, supersedable: false))  // ticket 2
        #expect(h.dropWaiting { _ in true }.isEmpty, "held while the channel is being made")
        h.hold()
        h.makeHeldChannels()
        #expect(h.sender.sent.count == 1)
        #expect(h.dropWaiting { _ in true } == [2])
        h.release()
        #expect(h.done == [1])
    }

    @Test("a request whose partition went and came back while APNs made its channel: the copy read under the new assignment takes its place (sent once, its ticket done), the first one's ticket is left to the next owner")
    func copyReadWhileTheChannelWasMade() throws {
        let h = EngineHarness()
        h.holdingChannels = true
        h.own([0])
        let request = h.broadcastRequest("match-7", sequence: 1, supersedable: false)
        h.submit(request, partition: 0)  // ticket 1
        h.disown([0])  // kept: its channel is being made
        h.own([0])  // back, under a new assignment
        h.submit(request, partition: 0)  // ticket 2: read again, it joins the first
        h.makeHeldChannels()
        #expect(h.sender.sent.count == 1)
        #expect(h.sink.final.map(\.requestId) == [request.requestId])
        #expect(h.abandoned == [1])
        #expect(h.done == [2], "the copy read under the current assignment is done, not abandoned")
    }

    @Test("a broadcast of an app's other environment is not sent on the activity's channel")
    func environmentsApart() throws {
        let h = EngineHarness()
        h.submit(h.broadcastRequest("match-7", sequence: 1))
        var sandbox = h.broadcastRequest("match-7", sequence: 2)
        sandbox.app.environment = .sandbox
        h.submit(sandbox)
        let refused = try #require(h.outcomes(2).last)
        #expect(refused.result == .rejected && refused.detail?.contains("never crosses environments") == true)
        #expect(h.channelsMade.count == 1 && h.sender.sent.count == 1)
    }
}
