import IsletKafka
import Testing

@Suite("OffsetTracker")
struct OffsetTrackerTests {
    private func message(_ partition: Int32, _ offset: Int64) -> KafkaMessage {
        KafkaMessage(topic: "t", partition: partition, offset: offset, key: nil, value: nil)
    }

    @Test("a record is released only when it and every earlier record of its partition are done; partitions are independent")
    func inOrder() {
        let tracker = OffsetTracker()
        for offset in 0..<4 { tracker.begin(message(0, Int64(offset))) }
        tracker.begin(message(1, 10))
        #expect(tracker.complete(message(0, 2)) == nil)
        #expect(tracker.complete(message(0, 1)) == nil)
        #expect(tracker.complete(message(1, 10))?.offset == 10)
        #expect(tracker.complete(message(0, 0))?.offset == 2, "the run 0, 1, 2 is released at once, as its last")
        #expect(tracker.open == 1)
        #expect(tracker.complete(message(0, 3))?.offset == 3)
        #expect(tracker.complete(message(0, 7)) == nil, "never begun")
    }

    @Test("revoked partitions are forgotten; thousands of records stay cheap")
    func revokeAndCompaction() {
        let tracker = OffsetTracker()
        for offset in 0..<5_000 { tracker.begin(message(0, Int64(offset))) }
        var released: Int64 = -1
        for offset in 0..<4_000 { if let r = tracker.complete(message(0, Int64(offset))) { released = r.offset } }
        #expect(released == 3_999)
        #expect(tracker.open == 1_000)
        tracker.revoke([KafkaTopicPartition(topic: "t", partition: 0)])
        #expect(tracker.open == 0)
        #expect(tracker.complete(message(0, 4_500)) == nil)
    }

    @Test("a partition being revoked takes no new record; a record abandoned there is not waited for and nothing is released past it; the others are unaffected")
    func revoking() async {
        let tracker = OffsetTracker()
        let p0 = KafkaTopicPartition(topic: "t", partition: 0)
        for offset in 0..<3 { tracker.begin(message(0, Int64(offset))) }
        tracker.begin(message(1, 0))
        tracker.beginRevoking([p0])
        #expect(!tracker.begin(message(0, 3)), "refused: the next owner reads it")
        #expect(tracker.begin(message(1, 1)), "another partition goes on")
        #expect(tracker.isOpen(in: [p0]))
        #expect(tracker.complete(message(0, 0))?.offset == 0)
        tracker.abandon(message(0, 1))  // dropped before it was sent
        #expect(tracker.complete(message(0, 2)) == nil, "never released past the abandoned record")
        #expect(!tracker.isOpen(in: [p0]), "nothing left to wait for")
        #expect(await tracker.waitUntilClosed([p0], timeout: .zero))
        tracker.revoke([p0])
        #expect(tracker.begin(message(0, 3)), "assigned again later: taken")
    }

    @Test("waiting for a revoked partition's records ends when the last completes, or at the timeout")
    func waitUntilClosed() async {
        let tracker = OffsetTracker()
        let p0 = KafkaTopicPartition(topic: "t", partition: 0)
        tracker.begin(message(0, 0))
        tracker.beginRevoking([p0])
        #expect(await tracker.waitUntilClosed([p0], timeout: .milliseconds(30)) == false)
        var checks = 0
        let closed = await tracker.waitUntilClosed([p0], timeout: .seconds(30)) {
            checks += 1
            if checks == 3 { _ = tracker.complete(message(0, 0)) }
        }
        #expect(closed)
        #expect(checks == 3)
    }

    @Test("work of an assignment revoked and given back is other work: its completion marks nothing of the records read again at the same offsets")
    func generations() throws {
        let tracker = OffsetTracker()
        let partition = KafkaTopicPartition(topic: "t", partition: 0)
        let old = try #require(tracker.beginWork(message(0, 100)))
        let oldNext = try #require(tracker.beginWork(message(0, 101)))
        // Lost (no revocation handler), then assigned again: 100 and 101 are read again.
        tracker.revoke([partition])
        let again = try #require(tracker.beginWork(message(0, 100)))
        let againNext = try #require(tracker.beginWork(message(0, 101)))
        #expect(!tracker.start(old), "the old work is not wanted any more")
        #expect(tracker.complete(old) == nil && tracker.complete(oldNext) == nil)
        tracker.abandon(old)
        #expect(tracker.open == 2, "the new records are untouched")
        #expect(tracker.start(again) && tracker.start(againNext))
        #expect(tracker.complete(againNext) == nil)
        #expect(tracker.complete(again)?.offset == 101)
        #expect(tracker.open == 0)
    }

    @Test("a revocation drops the work not started (waiting in a queue) and waits for what started; done work is never abandoned")
    func unstarted() async throws {
        let tracker = OffsetTracker()
        let partition = KafkaTopicPartition(topic: "t", partition: 0)
        let works = try (0..<4).map { try #require(tracker.beginWork(message(0, Int64($0)))) }
        #expect(tracker.start(works[0]) && tracker.start(works[1]))
        #expect(tracker.complete(works[1]) == nil, "0 is still open")
        tracker.beginRevoking([partition])
        #expect(tracker.beginWork(message(0, 4)) == nil, "nothing new begins while it is being revoked")
        #expect(!tracker.start(works[2]), "queued work does not start once its partition is being revoked")
        tracker.abandonUnstarted([partition])
        #expect(tracker.isOpen(in: [partition]), "0 started and is still under way")
        tracker.abandon(works[1])
        #expect(tracker.complete(works[0])?.offset == 1, "1 was done before the abandon, and stays done")
        #expect(!tracker.isOpen(in: [partition]))
        #expect(tracker.complete(works[2]) == nil && tracker.complete(works[3]) == nil, "abandoned: nothing at or after them is released")
    }
}
