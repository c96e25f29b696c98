/// A push that got no answer.
public struct APNsTransportError: Error, Sendable, Equatable, CustomStringConvertible {
    public enum Kind: Sendable, Equatable {
        /// The connection could not be opened.
        case connect
        /// The server said (GOAWAY) it did not process the stream: safe to send again unchanged.
        case notProcessed
        /// The connection or stream ended without an answer; APNs may or may not have delivered it.
        case lost
        /// The deadline passed before the request was completely written (no connection in time,
        /// or for a stream, or the server granted no flow-control window): APNs cannot have
        /// processed a request whose end it never received, so it is safe to send again unchanged.
        /// The connection it waited on takes no more pushes.
        case stalled
        /// No answer within the deadline, after the request was written (or handed to TLS and the
        /// socket, from where it may still go out); the stream was cancelled. APNs may have delivered it.
        case timeout
    }

    public var kind: Kind
    public var detail: String

    public init(_ kind: Kind, _ detail: String) {
        self.kind = kind
        self.detail = detail
    }

    /// Whether APNs may have delivered the push (a resend could reach the phone twice): after a
    /// lost connection or a timeout, not after a failed connect, a GOAWAY or a stall.
    public var isAmbiguous: Bool { kind == .lost || kind == .timeout }
    public var description: String { "\(kind): \(detail)" }
}
