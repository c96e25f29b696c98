import Foundation
import IsletMessages
import Logging

/// Judges taps and records them: each tap is checked (``TapVerifier``), a valid one is claimed
/// in ``RecentTaps`` (a repeat is not published again), and every record — clicks and rejected
/// taps alike — is published and acknowledged before a verdict is returned. A record Kafka did
/// not acknowledge turns its tap's verdict into `unavailable` (the app retries).
public struct Ingestor: Sendable {
    public let verifier: TapVerifier
    public let recent: RecentTaps
    public let publisher: any TapPublisher
    let metrics: IngestMetrics
    let clock: any WallClock
    /// Whether the next rejected tap is written to `islet.clicks-rejected.v1` (a sample, bounded
    /// per second: the API takes no credentials, so anyone can send rejected taps).
    let recordRejected: @Sendable () -> Bool
    let logger: Logger

    public init(
        verifier: TapVerifier, recent: RecentTaps, publisher: any TapPublisher, metrics: IngestMetrics, logger: Logger,
        clock: any WallClock = SystemWallClock(), recordRejected: @escaping @Sendable () -> Bool = { true }
    ) {
        self.verifier = verifier
        self.recent = recent
        self.publisher = publisher
        self.metrics = metrics
        self.logger = logger
        self.clock = clock
        self.recordRejected = recordRejected
    }

    /// The verdict of each tap, in order, once every record written for them is acknowledged.
    public func ingest(_ taps: [TapInput], clientId: String?) async -> [TapResult] {
        let receivedAt = IsletDate.truncatedToMilliseconds(clock.date)
        var batch = Batch(capacity: taps.count)
        for (index, tap) in taps.enumerated() {
            switch verifier.check(tap, receivedAt: receivedAt, clientId: clientId) {
            case .invalid(let rejected, let field):
                batch.results.append(TapResult(verdict: .rejected, error: rejected.reason.rawValue, field: field, reason: rejected.detail))
                if recordRejected() {
                    batch.record(.rejected(rejected), for: index)
                } else {
                    metrics.unrecorded()
                }
            case .valid(let click, let link):
                judge(click, link: link, tap: tap, index: index, clientId: clientId, receivedAt: receivedAt, into: &batch)
            }
        }
        if !batch.records.isEmpty { await publish(&batch) }
        for result in batch.results { metrics.tap(result) }
        return batch.results
    }

    /// What one request's taps came to so far: a verdict per tap, and the records to write.
    struct Batch {
        var results: [TapResult] = []
        var records: [TapRecord] = []
        /// For each record: the tap it answers, and the click id it claimed (to settle).
        var owners: [(tap: Int, claimed: String?)] = []
        /// Repeats within this request: tap index → the index of the first occurrence.
        var repeatOf: [Int: Int] = [:]
        var firstInRequest: [String: Int] = [:]

        init(capacity: Int) { results.reserveCapacity(capacity) }

        mutating func record(_ record: TapRecord, for tap: Int, claimed: String? = nil) {
            records.append(record)
            owners.append((tap, claimed))
        }
    }

    /// A valid tap: claimed in ``RecentTaps`` (or seen earlier in this request), then accepted, or
    /// answered as the repeat of the click it repeats.
    private func judge(
        _ click: ClickEvent, link: String, tap: TapInput, index: Int, clientId: String?, receivedAt: Date, into batch: inout Batch
    ) {
        let claim: RecentTaps.Claim
        if let first = batch.firstInRequest[click.clickId] {
            batch.repeatOf[index] = first
            claim = .duplicate
        } else {
            batch.firstInRequest[click.clickId] = index
            claim = recent.claim(click.clickId, link: link, at: receivedAt)
        }
        switch claim {
        case .first:
            batch.results.append(TapResult(verdict: .accepted, clickId: click.clickId))
            batch.record(.click(click), for: index, claimed: click.clickId)
        case .duplicate, .tooSoon:
            // A tap too soon after another of its link is answered as that click's repeat.
            var counted = click.clickId
            var detail = "tap \(click.clickId) was already accepted"
            if case .tooSoon(let earlier) = claim {
                counted = earlier
                detail = "its link was counted as tap \(earlier) less than \(RecentTaps.linkWindowDescription) before: one tap per link and second"
            }
            batch.results.append(TapResult(verdict: .duplicate, clickId: counted))
            guard recordRejected() else {
                metrics.unrecorded()
                return
            }
            batch.record(
                .rejected(
                    RejectedClick(
                        reason: .duplicateTap, detail: detail, url: tap.url ?? "",
                        tappedAt: click.tappedAt, appVersion: click.appVersion, osVersion: click.osVersion, clientId: clientId,
                        receivedAt: receivedAt)),
                for: index)
        case .inFlight:
            batch.results.append(
                TapResult(
                    verdict: .unavailable, clickId: click.clickId, error: "unavailable",
                    reason: "the same tap is being recorded by another request: retry"))
        }
    }

    /// Publishes the batch's records and waits for Kafka's acknowledgements: each claim is settled,
    /// and a tap whose record was not acknowledged turns `unavailable` (with its repeats).
    private func publish(_ batch: inout Batch) async {
        let start = ContinuousClock.now
        let errors = await publisher.publish(batch.records)
        metrics.acknowledged(ContinuousClock.now - start)
        for (owner, error) in zip(batch.owners, errors) {
            if let claimed = owner.claimed { recent.settle(claimed, acknowledged: error == nil) }
            guard let error else { continue }
            logger.warning("a tap's record was not acknowledged", metadata: ["kafka.error": "\(error)"])
            batch.results[owner.tap] = TapResult(
                verdict: .unavailable, clickId: batch.results[owner.tap].clickId, error: "unavailable",
                reason: "Kafka did not acknowledge the tap: retry")
        }
        // A repeat within the request shares the fate of its first occurrence.
        for (index, first) in batch.repeatOf where batch.results[first].verdict == .unavailable {
            batch.results[index] = batch.results[first]
        }
    }
}
