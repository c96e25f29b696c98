import Foundation

/// An entry of `ISLET_ANALYTICS_TRUSTED_PROXIES` that is not an address or network.
public struct TrustedProxiesError: Error, Sendable, CustomStringConvertible {
    public var position: Int
    public var description: String { "item \(position) is not an IP address or an address/prefix network" }
}
