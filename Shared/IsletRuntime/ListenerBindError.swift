import NIOCore

#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A listener that could not open its socket, said so an operator can act on it: which listener,
/// the address, the variables that set it, and why.
///
///     token-registry cannot listen on 0.0.0.0:8081 (http: ISLET_HTTP_HOST, ISLET_HTTP_PORT): the port is
///     in use by another process (`ss -ltnp 'sport = :8081'` names it)
public struct ListenerBindError: Error, CustomStringConvertible, Sendable {
    public let listener: String
    public let host: String
    public let port: Int
    public let variables: [String]
    public let reason: String

    public var description: String {
        let variables = variables.isEmpty ? "" : ": \(variables.joined(separator: ", "))"
        return "cannot listen on \(host):\(port) (\(listener)\(variables)): \(reason)"
    }

    /// The bind failure `error` is, in words; nil for an error that is not one.
    static func reason(for error: any Error, port: Int) -> String? {
        if let error = error as? IOError {
            switch error.errnoCode {
            case EADDRINUSE: return "the port is in use by another process (`ss -ltnp 'sport = :\(port)'` names it)"
            case EACCES: return "permission denied (a port below 1024 needs privileges)"
            case EADDRNOTAVAIL: return "no network interface of this machine has that address"
            default: return nil
            }
        }
        if error is SocketAddressError || error is SocketAddressError.UnknownHost { return "the host name does not resolve to an address" }
        return nil
    }
}
