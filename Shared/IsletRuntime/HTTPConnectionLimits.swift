/// Limits what one client can hold on a public HTTP port: each request must arrive in full within
/// a deadline, and one address may keep only so many connections open.
///
/// A slow client (headers a line every few seconds, a body a byte at a time, or a connection opened
/// and left) otherwise holds its connection — memory, a file descriptor, a place in the server —
/// for as long as it likes, and a few hundred of them fill a port.
public struct HTTPConnectionLimits: Sendable, Equatable {
    /// How long a client has to send a whole request (head and body): from the connection's
    /// opening, and from the end of the previous response on a kept-alive connection. Past it the
    /// connection is closed. Zero turns it off.
    public var requestTimeout: Duration
    /// Connections one remote address may hold at once; the next is closed as soon as it opens.
    /// Zero turns it off (behind a proxy every connection comes from the proxy's address: let the
    /// proxy enforce it).
    public var maxConnectionsPerAddress: Int

    public init(requestTimeout: Duration = .seconds(15), maxConnectionsPerAddress: Int = 256) {
        self.requestTimeout = requestTimeout
        self.maxConnectionsPerAddress = maxConnectionsPerAddress
    }
}
