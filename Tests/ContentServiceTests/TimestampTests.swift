import Foundation
import IsletMessages
import IsletTesting
import IsletTokens
import Testing
@testable import ContentService

/// content-service's `aps.timestamp` rule (ContentTimestamps; issue 57: a burst drifted ahead of
/// the clock, and a partition's new owner could stamp below its previous owner's late requests).
@Suite("Timestamps of an activity's requests")
struct TimestampTests {
    let now = Date(timeIntervalSince1970: 1_795_000_000)
    var seconds: Int64 { ContentTimestamps.seconds(now) }

    @Test("the event's time, one past the last when that is not older, never more than the lead ahead; past it the last again, never back")
    func burstStaysNearTheClock() {
        #expect(ContentTimestamps.next(wanted: seconds - 30, now: now, last: nil) == seconds - 30)
        #expect(ContentTimestamps.next(wanted: seconds + 3_600, now: now, last: nil) == seconds + ContentTimestamps.lead, "a backend clock ahead is not believed")
        var last: Int64? = nil
        var stamps: [Int64] = []
        for _ in 0..<100 {
            let stamp = ContentTimestamps.next(wanted: seconds, now: now, last: last)
            stamps.append(stamp)
            last = stamp
        }
        #expect(stamps == stamps.sorted(), "never back")
        #expect(stamps.max() == seconds + ContentTimestamps.lead, "a burst of 100 in one second stays within the lead")
        #expect(Set(stamps).count == Int(ContentTimestamps.lead) + 1, "one past the last until the lead, then equal")
        #expect(ContentTimestamps.next(wanted: seconds, now: now, last: seconds + 60) == seconds + 60, "an earlier stamp far ahead is never undercut")
    }

    @Test("a partition newly assigned starts past what its previous owner can have stamped; the lead then counts from there")
    func newOwnerStartsPastTheOld() {
        let assigned = now
        let floor = ContentTimestamps.floor(assignedAt: assigned)
        // The previous owner's last request, stamped as far ahead as it could just before the assignment.
        let previous = ContentTimestamps.next(wanted: seconds + 60, now: assigned, last: nil)
        let first = ContentTimestamps.next(wanted: seconds, now: assigned, last: nil, floor: floor)
        #expect(first >= previous, "not older than the previous owner's last (iOS shows an equal timestamp)")
        let second = ContentTimestamps.next(wanted: seconds, now: assigned, last: first, floor: floor)
        #expect(second == first, "a burst right after the assignment repeats the floor (not older: shown)")
        #expect(first <= seconds + ContentTimestamps.lead, "never more than the lead ahead, right after the assignment too")
        #expect(ContentTimestamps.lead == 2)
        // The owner before had been assigned the partition a second before: its own floor was lower.
        let previousFloor = ContentTimestamps.floor(assignedAt: assigned.addingTimeInterval(-1))
        #expect(ContentTimestamps.next(wanted: seconds, now: assigned, last: nil, floor: previousFloor) < first)
        let later = now.addingTimeInterval(60)
        #expect(ContentTimestamps.next(wanted: seconds + 60, now: later, last: second, floor: floor) == seconds + 60, "once the clock passed the floor, the clock")
    }

    @Test("events of one activity prepared at the same instant right after an assignment (one timestamp, the floor): the memory moves on to each")
    func sameInstantAtTheFloor() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        engine.trackChanges(of: [0])
        var stamps: [Int64] = []
        for sequence in Int64(1)...3 {
            guard case .send(let prepared) = try engine.prepare(event("DeliveryAttributes", sequence: sequence, ["status": .string("preparing"), "orderId": .string("1")]), partition: 0)
            else { Issue.record("event \(sequence) ignored"); return }
            engine.commit(prepared)
            stamps.append(prepared.requests[0].apnsTimestamp)
        }
        #expect(Set(stamps).count == 1, "all at the floor: \(stamps)")
        #expect(engine.memory(of: "com.example.food/order-42")?.lastSequence == 3)
    }
}
