import Dispatch

/// Monotonic nanoseconds (since boot), for timestamps kept in atomics.
enum MonotonicTime {
    static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    static func nanoseconds(_ duration: Duration) -> UInt64 {
        let (seconds, attoseconds) = duration.components
        return UInt64(max(0, seconds)) &* 1_000_000_000 &+ UInt64(max(0, attoseconds / 1_000_000_000))
    }

    /// `later - earlier` as a readable number of seconds ("7.2 s").
    static func seconds(from earlier: UInt64, to later: UInt64) -> String {
        let tenths = (later &- earlier) / 100_000_000
        return "\(tenths / 10).\(tenths % 10) s"
    }
}
