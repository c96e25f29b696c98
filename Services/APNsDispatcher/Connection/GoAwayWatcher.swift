import NIOHTTP2
import Synchronization

/// A GOAWAY from the server, as ``APNsStreams`` read it: the last stream it processed. Read from
/// any thread (whether a connection is still usable).
final class GoAwayWatcher: Sendable {
    private let lastStreamID = Mutex<HTTP2StreamID?>(nil)

    var received: Bool { lastStreamID.withLock { $0 != nil } }

    /// Whether a stream was processed: `nil` while no GOAWAY came.
    func processed(_ stream: HTTP2StreamID) -> Bool? {
        lastStreamID.withLock { last in last.map { stream <= $0 } }
    }

    func note(lastStreamID last: HTTP2StreamID) {
        lastStreamID.withLock { $0 = min($0 ?? last, last) }
    }
}
