import IsletKafka
import Testing

@Suite("What changed, by partition")
struct PartitionChangesTests {
    @Test("many changes of a key make one; taken once; until the first track every partition counts, then only those tracked; gained partitions are told")
    func tracking() {
        var changes = PartitionChanges<String>()
        changes.note("a", partition: 1)
        changes.note("a", partition: 1)
        changes.note("b", partition: 2)
        changes.note("no partition", partition: nil)
        #expect(changes.count(partitions: [1, 2]) == 2)
        #expect(changes.track(only: [1]).isEmpty, "the first call gains nothing: everything was tracked")
        #expect(changes.count(partitions: [1, 2]) == 1, "partition 2's changes dropped")
        changes.note("c", partition: 2)
        #expect(changes.count(partitions: [2]) == 0, "an untracked partition's change is not kept")
        let taken = changes.take(partitions: [1, 2])
        #expect(taken.count == 1 && taken[0].partition == 1 && taken[0].keys == ["a"])
        #expect(changes.take(partitions: [1]).isEmpty, "taken once")
        #expect(changes.track(only: [1, 3]) == [3])
        changes.note("d", partition: 3)
        changes.drop(partitions: [3])
        #expect(changes.count(partitions: [3]) == 0)
    }
}
