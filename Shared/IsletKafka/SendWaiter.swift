import Synchronization

/// One awaited ``KafkaProducer/send(topic:key:value:headers:partition:)``: its continuation,
/// resumed by whichever comes first — the record's verdict or its deadline — and never twice.
final class SendWaiter: Sendable {
    private let continuation: Mutex<UnsafeContinuation<SendAttempt, any Error>?>

    init(_ continuation: UnsafeContinuation<SendAttempt, any Error>) {
        self.continuation = Mutex(continuation)
    }

    /// Resumes the sender with `result`, unless it was resumed already; says whether it did.
    @discardableResult
    func finish(_ result: Result<SendAttempt, any Error>) -> Bool {
        let waiting = continuation.withLock { waiting in
            defer { waiting = nil }
            return waiting
        }
        waiting?.resume(with: result)
        return waiting != nil
    }
}
