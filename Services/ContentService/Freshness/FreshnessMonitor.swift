import Foundation
import IsletKafka
import IsletMessages
import Logging
import ServiceLifecycle
import Synchronization

/// The freshness monitor (Lyft): every ``FreshnessPolicy/checkInterval``, looks at the live
/// activities of the partitions this instance owns, re-sends stale content, ends the severely stale
/// and the old, and reports the classes on /metrics.
public struct FreshnessMonitor: Service {
    let engine: ContentEngine
    let sender: RequestSender
    let metrics: ContentMetrics
    let logger: Logger
    /// The tokens of the activities the monitor ended, to invalidate in token-registry.
    let invalidations: TokenInvalidations
    /// Where the latest payloads the memory does not keep are read again.
    let payloads: RequestPayloads
    /// Where a start's `startUnconfirmed` is written (`islet.push-outcomes.v1`).
    let outcomesTopic: String

    /// - Parameter invalidator: where an activity the monitor ended has its token invalidated
    ///   (`nil`: not configured; the token stays active until the app ends the activity).
    /// - Parameter payloads: where payloads the memory dropped (``RequestSender`` reports where
    ///   Kafka stored each request) are read again.
    public init(
        engine: ContentEngine, sender: RequestSender, metrics: ContentMetrics, logger: Logger, invalidator: (any ActivityInvalidating)? = nil,
        payloads: RequestPayloads, outcomesTopic: String = IsletTopics.pushOutcomes.name
    ) {
        self.outcomesTopic = outcomesTopic
        self.engine = engine
        self.sender = sender
        self.metrics = metrics
        self.logger = logger
        self.payloads = payloads
        self.invalidations = TokenInvalidations(invalidator: invalidator, metrics: metrics, logger: logger)
    }

    public func run() async throws {
        while !Task.isCancelled {
            guard (try? await cancelWhenGracefulShutdown { try await Task.sleep(for: engine.freshness.checkInterval) }) != nil else { return }
            try await check()
        }
    }

    /// One pass (tests call it with a manual clock).
    @discardableResult
    public func check() async throws -> [PushRequest] {
        var sent = try await pass()
        // Activities with something to send whose latest payload is on Kafka only: read, then
        // looked at again (outside the turn: events go on meanwhile).
        let wanted = engine.takePayloadsToRead()
        if !wanted.isEmpty {
            let read = await payloads.read(wanted)
            logger.info(
                "latest payloads read again from Kafka",
                metadata: ["payloads.wanted": "\(wanted.count)", "payloads.read": "\(read.found.count)", "payloads.lost": "\(read.lost.count)"])
            engine.restorePayloads(read.found, lost: read.lost)
            sent += try await pass()
        }
        await reportUnconfirmedStarts()
        // Once the end has its outcome: invalidated earlier, the dispatcher would not send the end.
        let (memory, now) = (self.engine, self.engine.clock.date)
        await invalidations.flush { item in
            memory.outcome(of: item.endRequestId, activityKey: MessageKey.activity(bundleId: item.bundleId, activityId: item.activityId)) != nil
                || now.timeIntervalSince(item.endSentAt) > TokenInvalidations.endWait
        }
        for (freshness, count) in engine.freshnessCounts() {
            metrics.activities(freshness, count)
        }
        return sent
    }

    /// Writes each start the pass found unconfirmed to the outcomes topic (token-registry reads it
    /// and stops using the push-to-start token). One Kafka does not take is found again on the next
    /// pass.
    private func reportUnconfirmedStarts() async {
        for start in engine.takeUnconfirmedStarts() {
            do {
                try await sender.producer.send(start.outcome, to: outcomesTopic)
                engine.reported(start)
                metrics.startUnconfirmed()
                logger.warning(
                    "a push-to-start APNs accepted was not confirmed by the activity's update token: its push-to-start token may be stale",
                    metadata: [
                        "activity.key": "\(start.activityKey)", "request.id": "\(start.outcome.requestId)",
                        "token.fingerprint": "\(start.outcome.tokenFingerprint ?? "unknown")",
                    ])
            } catch {
                logger.warning(
                    "startUnconfirmed not written: tried again on the next pass", metadata: ["activity.key": "\(start.activityKey)", "error": "\(error)"])
            }
        }
    }

    /// One sweep, in the loop's turn: its requests go to Kafka in order, as an event's do, and are
    /// acknowledged in the background (a request Kafka refuses is sent again before the next
    /// turn's work, ``RequestSender/repair()``). The turn is not held while Kafka acknowledges:
    /// a slow or stalled broker does not stop events behind hundreds of resends.
    private func pass() async throws -> [PushRequest] {
        try await sender.turn { () async throws -> [PushRequest] in
            try await sender.repair()
            var sent: [PushRequest] = []
            for prepared in engine.sweep(owned: sender.ownedPartitions) {
                // The token is invalidated once the end is on Kafka (and then answered, or 10 minutes old).
                let invalidation = prepared.invalidation.flatMap { reason in
                    // (The activity's own end: its copies' outcomes are not the activity's.)
                    prepared.requests.last(where: { !$0.isDeviceCopy }).map { request in
                        TokenInvalidations.Item(
                            activityId: request.sourceActivityId ?? request.activityId ?? "", bundleId: request.app.bundleId, reason: reason,
                            endRequestId: request.requestId, endSentAt: request.createdAt)
                    }
                }
                try await sender.enqueue(prepared) { [invalidations] in
                    if let invalidation { invalidations.add(invalidation) }
                }
                // (A device's catch-up copy is not the monitor's own re-send or end.)
                for request in prepared.requests where !request.isDeviceCopy {
                    let action = request.event == .end ? "end" : "resend"
                    metrics.freshnessAction(action)
                    logger.info("freshness monitor", metadata: ["activity.key": "\(prepared.activityKey)", "action": "\(action)"])
                }
                sent += prepared.requests
            }
            return sent
        }
    }
}
