#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif
import Synchronization

/// The connections each remote address holds now, shared by the handlers of one listener.
public final class ConnectionCounts: Sendable {
    private let counts = Mutex<[String: Int]>([:])

    public init() {}

    /// Counts a new connection of `address`; `false` (and not counted) when it already holds `limit`.
    func open(_ address: String, limit: Int) -> Bool {
        counts.withLock { counts in
            let current = counts[address, default: 0]
            guard limit <= 0 || current < limit else { return false }
            counts[address] = current + 1
            return true
        }
    }

    func close(_ address: String) {
        counts.withLock { counts in
            guard let current = counts[address] else { return }
            counts[address] = current > 1 ? current - 1 : nil
        }
    }

    /// The client an address stands for: an IPv4 address itself; an IPv6 address by its /64 (one
    /// subscriber's network: whoever holds one has billions of addresses to open connections from).
    public static func client(of address: String) -> String {
        guard address.contains(":") else { return address }
        var bytes = in6_addr()
        guard inet_pton(AF_INET6, address, &bytes) == 1 else { return address }
        let prefix = withUnsafeBytes(of: &bytes) { Array($0.prefix(8)) }
        if prefix.allSatisfy({ $0 == 0 }) { return address }  // ::1, IPv4-mapped: not a /64 of anyone's
        return stride(from: 0, to: 8, by: 2).map { String(UInt16(prefix[$0]) << 8 | UInt16(prefix[$0 + 1]), radix: 16) }.joined(separator: ":") + "::/64"
    }

    /// Connections of `address` now (tests).
    public func count(of address: String) -> Int { counts.withLock { $0[address, default: 0] } }
}
