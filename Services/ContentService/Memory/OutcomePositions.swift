import IsletKafka

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
