import Foundation
import IsletKafka
import IsletMessages
import IsletTokens

/// This instance's writes of keys that another instance may have written just before, unseen
/// (this one's table reads the topic behind): kept, by key, until the reader reaches them. The
/// records of the key the reader meets before a write are noted, the last of them standing; when
/// it reaches the write itself, the write and that last record are handed over once, to decide
/// whether the write undid something (``Registry/readBehind(_:key:at:)``,
/// ``Registry/readBehindRegistration(_:key:at:)``). A write the reader never reaches is forgotten
/// after 10 minutes.
struct OwnWrites<Note: Sendable>: Sendable {
    struct Write: Sendable {
        var position: TokenTable.Position
        var at: Date
        /// What the write was (an invalidation's verdict, …).
        var note: Note
        /// The last record of the key read before it.
        var behind: (record: TokenRecord, position: TokenTable.Position)?
    }

    private var writes: [String: Write] = [:]

    /// This instance wrote `key` at `position`.
    mutating func wrote(_ key: String, at position: TokenTable.Position, note: Note, now: Date) {
        writes = writes.filter { now.timeIntervalSince($0.value.at) < 600 }
        writes[key] = Write(position: position, at: now, note: note)
    }

    /// The reader met a record of `key` at `position` that the table did not take: before this
    /// instance's write of the key it is noted; at the write itself, the write is returned (with
    /// the last record noted) and forgotten. `nil` otherwise.
    mutating func read(_ record: TokenRecord, key: String, at position: TokenTable.Position) -> Write? {
        guard var mine = writes[key], mine.position.partition == position.partition else { return nil }
        if position.offset < mine.position.offset {
            if (mine.behind?.position.offset ?? .min) < position.offset { mine.behind = (record, position) }
            writes[key] = mine
            return nil
        }
        guard position == mine.position else { return nil }
        writes[key] = nil
        return mine
    }
}
