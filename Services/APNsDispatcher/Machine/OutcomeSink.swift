import Foundation
import IsletMessages
import IsletTokens
import Logging
import Synchronization

/// Where outcomes go: `islet.push-outcomes.v1`.
public protocol OutcomeSink: Sendable {
    /// Returns once the outcome is persisted (a push-to-start's `sending` record is awaited so).
    func publish(_ outcome: PushOutcome) async throws
    /// Hands the outcome over and returns (waiting only while the producer's queue is full);
    /// `persisted` is then called exactly once, with `nil` once it is persisted or with why it was
    /// not. The engine's final outcomes go this way: no task waits for each acknowledgement. By
    /// default, ``publish(_:)`` in a task of its own.
    func submit(_ outcome: PushOutcome, persisted: @escaping @Sendable ((any Error)?) -> Void) async
    /// Persists a broadcast channel's record on `islet.broadcast-channels.v1`.
    func record(_ channel: BroadcastChannelRecord) async throws
}

extension OutcomeSink {
    public func submit(_ outcome: PushOutcome, persisted: @escaping @Sendable ((any Error)?) -> Void) async {
        Task {
            do {
                try await publish(outcome)
                persisted(nil)
            } catch {
                persisted(error)
            }
        }
    }
}
