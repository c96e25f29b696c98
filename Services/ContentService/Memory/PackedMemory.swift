import Foundation
import IsletKafka
import IsletMessages
import Synchronization

/// An `Int64?` in 8 bytes (`Int64.min` is none: no sequence or timestamp takes it).
struct PackedInt: Sendable, Equatable {
    private var raw = Int64.min
    init(_ value: Int64? = nil) { raw = value ?? .min }
    var value: Int64? { raw == .min ? nil : raw }
}

/// The positions of an activity's latest outcomes on `islet.push-outcomes.v1`, in 32 bytes and
/// no allocation: each a partition (16 bits) and an offset (48 bits) in one word, the latest
/// first. A position inserted again changes nothing (a record read twice, by a restore and the
/// follower).
struct OutcomePositions: Sendable, Equatable {
    static let capacity = 4
    private var words: (UInt64, UInt64, UInt64, UInt64) = (0, 0, 0, 0)

    init() {}

    init(_ positions: [KafkaPosition]) {
        for position in positions.prefix(Self.capacity).reversed() { insert(position) }
    }

    /// 0 is none: a position is stored plus one.
    private static func word(_ position: KafkaPosition) -> UInt64? {
        guard (0..<(1 << 16)).contains(position.partition), (0..<((1 << 48) - 1)).contains(position.offset) else { return nil }
        return UInt64(position.partition) << 48 | UInt64(position.offset + 1)
    }

    private var all: [UInt64] { [words.0, words.1, words.2, words.3] }

    static func == (a: Self, b: Self) -> Bool { a.all == b.all }

    var positions: [KafkaPosition] {
        all.filter { $0 != 0 }.map { KafkaPosition(partition: Int32($0 >> 48), offset: Int64($0 & ((1 << 48) - 1)) - 1) }
    }

    mutating func insert(_ position: KafkaPosition) {
        guard let word = Self.word(position), !all.contains(word) else { return }
        words = (word, words.0, words.1, words.2)
    }
}

/// A `Date?` in 8 bytes (minus infinity is none).
struct PackedDate: Sendable, Equatable {
    private var raw = -Double.infinity
    init(_ date: Date? = nil) { raw = date?.timeIntervalSinceReferenceDate ?? -.infinity }
    var date: Date? { raw == -.infinity ? nil : Date(timeIntervalSinceReferenceDate: raw) }
}

/// A request id: its 16 bytes when it is a UUID in the form Islet makes them (lowercase), else the text.
enum PackedId: Sendable, Equatable {
    case uuid(UInt64, UInt64)
    case text(String)

    init(_ text: String) {
        // `UUID(uuidString:)` takes the canonical form only: without uppercase it formats back the same.
        if text.utf8.count == 36, !text.utf8.contains(where: { (65...90).contains($0) }), let uuid = UUID(uuidString: text) {
            let (high, low) = withUnsafeBytes(of: uuid.uuid) { ($0.loadUnaligned(as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
            self = .uuid(high, low)
        } else {
            self = .text(text)
        }
    }

    var text: String {
        switch self {
        case .text(let text): return text
        case .uuid(let high, let low):
            var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &bytes) { buffer in
                buffer.storeBytes(of: high, as: UInt64.self)
                buffer.storeBytes(of: low, toByteOffset: 8, as: UInt64.self)
            }
            return UUID(uuid: bytes).uuidString.lowercased()
        }
    }
}

/// Values that repeat across activities (states, attributes types, event kinds, results, apps),
/// held once per process and referred to by a 4-byte code (0: none). Never emptied: what it holds
/// is bounded by the templates, the apps and the kinds of answer, not by the activities.
final class InternTable<Value: Hashable & Sendable>: Sendable {
    private let table = Mutex<(codes: [Value: UInt32], values: [Value])>(([:], []))

    func code(_ value: Value?) -> UInt32 {
        guard let value else { return 0 }
        return table.withLock { table in
            if let code = table.codes[value] { return code }
            table.values.append(value)
            let code = UInt32(table.values.count)
            table.codes[value] = code
            return code
        }
    }

    func value(_ code: UInt32) -> Value? {
        guard code > 0 else { return nil }
        return table.withLock { $0.values[Int(code) - 1] }
    }
}

enum Interned {
    static let strings = InternTable<String>()
    static let apps = InternTable<AppTarget>()
}

extension OptionSet {
    mutating func set(_ member: Element, _ on: Bool) {
        if on { insert(member) } else { remove(member) }
    }
}
