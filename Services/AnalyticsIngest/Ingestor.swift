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
        var results: [TapResult] = []
        results.reserveCapacity(taps.count)
        var records: [TapRecord] = []
        /// For each record: the tap it answers, and the click id it claimed (to settle).
        var owners: [(tap: Int, claimed: String?)] = []
        /// Repeats within this request: tap index → the index of the first occurrence.
        var repeatOf: [Int: Int] = [:]
        var firstInRequest: [String: Int] = [:]

        for (index, tap) in taps.enumerated() {
            switch verifier.check(tap, receivedAt: receivedAt, clientId: clientId) {
            case .invalid(let rejected, let field):
                results.append(TapResult(verdict: .rejected, error: rejected.reason.rawValue, field: field, reason: rejected.detail))
                if recordRejected() {
                    records.append(.rejected(rejected))
                    owners.append((index, nil))
                } else {
                    metrics.unrecorded()
                }
            case .valid(let click, let link):
                let claim: RecentTaps.Claim
                if let first = firstInRequest[click.clickId] {
                    repeatOf[index] = first
                    claim = .duplicate
                } else {
                    firstInRequest[click.clickId] = index
                    claim = recent.claim(click.clickId, link: link, at: receivedAt)
                }
                switch claim {
                case .first:
                    results.append(TapResult(verdict: .accepted, clickId: click.clickId))
                    records.append(.click(click))
                    owners.append((index, click.clickId))
                case .duplicate, .tooSoon:
                    // A tap too soon after another of its link is answered as that click's repeat.
                    var counted = click.clickId
                    var detail = "tap \(click.clickId) was already accepted"
                    if case .tooSoon(let earlier) = claim {
                        counted = earlier
                        detail = "its link was counted as tap \(earlier) less than \(RecentTaps.linkWindowDescription) before: one tap per link and second"
                    }
                    results.append(TapResult(verdict: .duplicate, clickId: counted))
                    guard recordRejected() else {
                        metrics.unrecorded()
                        break
                    }
                    records.append(
                        .rejected(
                            RejectedClick(
                                reason: .duplicateTap, detail: detail, url: tap.url ?? "",
                                tappedAt: click.tappedAt, appVersion: click.appVersion, osVersion: click.osVersion, clientId: clientId,
                                receivedAt: receivedAt)))
                    owners.append((index, nil))
                case .inFlight:
                    results.append(
                        TapResult(
                            verdict: .unavailable, clickId: click.clickId, error: "unavailable",
                            reason: "the same tap is being recorded by another request: retry"))
                }
            }
        }

        if !records.isEmpty {
            let start = ContinuousClock.now
            let errors = await publisher.publish(records)
            metrics.acknowledged(ContinuousClock.now - start)
            for (owner, error) in zip(owners, errors) {
                if let claimed = owner.claimed { recent.settle(claimed, acknowledged: error == nil) }
                guard let error else { continue }
                logger.warning("a tap's record was not acknowledged", metadata: ["kafka.error": "\(error)"])
                results[owner.tap] = TapResult(
                    verdict: .unavailable, clickId: results[owner.tap].clickId, error: "unavailable",
                    reason: "Kafka did not acknowledge the tap: retry")
            }
            // A repeat within the request shares the fate of its first occurrence.
            for (index, first) in repeatOf where results[first].verdict == .unavailable {
                results[index] = results[first]
            }
        }
        for result in results { metrics.tap(result) }
        return results
    }
}
