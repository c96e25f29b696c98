import Foundation

#if canImport(Glibc)
    import Glibc
#elseif canImport(Darwin)
    import Darwin
#endif

/// The proxies whose forwarded-for header is believed: addresses and networks (`10.0.0.0/8`,
/// `2001:db8::/32`, `192.0.2.7`). A request that did not come from one of them is identified by
/// its own TCP peer, whatever headers it carries: otherwise any client could choose its identity
/// for the rate limiter, one header value per request.
public struct TrustedProxies: Sendable, Equatable {
    struct Network: Sendable, Equatable {
        /// 4 or 16 bytes.
        var address: [UInt8]
        var prefixLength: Int

        func contains(_ other: [UInt8]) -> Bool {
            guard other.count == address.count else { return false }
            var remaining = prefixLength
            for index in address.indices where remaining > 0 {
                let bits = min(8, remaining)
                let mask = UInt8(truncatingIfNeeded: 0xFF << (8 - bits))
                if address[index] & mask != other[index] & mask { return false }
                remaining -= bits
            }
            return true
        }
    }

    let networks: [Network]

    /// Parses `address[/prefix]` entries; the error names the first entry that is not one.
    public init(_ entries: [String]) throws(TrustedProxiesError) {
        var networks: [Network] = []
        for (index, entry) in entries.enumerated() {
            let parts = entry.split(separator: "/", maxSplits: 1).map(String.init)
            guard let bytes = parts.first.flatMap(Self.bytes) else { throw TrustedProxiesError(position: index + 1) }
            let length: Int
            if parts.count == 2 {
                guard let given = Int(parts[1]), (0...bytes.count * 8).contains(given) else { throw TrustedProxiesError(position: index + 1) }
                length = given
            } else {
                length = bytes.count * 8
            }
            networks.append(Network(address: bytes, prefixLength: length))
        }
        self.networks = networks
    }

    public var isEmpty: Bool { networks.isEmpty }

    /// Whether `address` (text, IPv4 or IPv6; an IPv4-mapped IPv6 address counts as IPv4) is one of them.
    public func contains(_ address: String) -> Bool {
        guard var bytes = Self.bytes(address) else { return false }
        if bytes.count == 16, bytes[0..<10].allSatisfy({ $0 == 0 }), bytes[10] == 0xFF, bytes[11] == 0xFF { bytes = Array(bytes[12...]) }
        return networks.contains { $0.contains(bytes) }
    }

    /// The client a request speaks for: the TCP `peer` unless it is a trusted proxy; then the
    /// right-most entry of the forwarded-for values that is not itself a trusted proxy (each proxy
    /// appends the address it received the request from, so entries left of that one are the
    /// client's own claims).
    public func client(peer: String?, forwardedFor values: [String]) -> String? {
        guard let peer else { return nil }
        guard contains(peer) else { return peer }
        let entries = values.flatMap { $0.split(separator: ",") }.map { $0.trimmingCharacters(in: .whitespaces) }
        for raw in entries.reversed() where !raw.isEmpty {
            let entry = Self.address(of: raw)
            guard Self.bytes(entry) != nil else { return peer }  // not an address: the chain is not to be believed
            if !contains(entry) { return entry }
        }
        return peer
    }

    /// The address of a forwarded-for entry, without the port or brackets some proxies add
    /// (`203.0.113.5:4711`, `[2001:db8::1]:443`, `[2001:db8::1]`).
    static func address(of entry: String) -> String {
        if entry.hasPrefix("["), let close = entry.firstIndex(of: "]") { return String(entry[entry.index(after: entry.startIndex)..<close]) }
        let colons = entry.filter { $0 == ":" }.count
        if colons == 1, let colon = entry.firstIndex(of: ":") { return String(entry[..<colon]) }
        return entry
    }

    /// The bytes of an IPv4 or IPv6 address in text; `nil` when it is neither.
    static func bytes(_ text: String) -> [UInt8]? {
        // A byte buffer rather than in_addr/in6_addr: with NIO in the build those C types resolve
        // to its CNIOLinux module, which a release build then refuses (MemberImportVisibility).
        var address = [UInt8](repeating: 0, count: 16)
        if inet_pton(AF_INET, text, &address) == 1 { return Array(address.prefix(4)) }
        if inet_pton(AF_INET6, text, &address) == 1 { return address }
        return nil
    }
}
