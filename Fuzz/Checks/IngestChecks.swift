import AnalyticsIngest
import Foundation
import HTTPTypes
import IsletLinks
import IsletMessages
import IsletRuntime

/// The properties the analytics-ingest body fuzzer checks: the bodies of `POST /v1/taps` and
/// `POST /v1/taps/batch` read as the routes read them (``IngestBody``), and every tap judged by
/// ``TapVerifier`` with the default settings and the link fuzzer's key (``LinkChecks``). The first
/// byte picks the route (even: one tap, odd: a batch), the rest is the body.
///
/// For every input there is a verdict without a trap: a body that does not decode is 400
/// `malformedBody`, a batch of no taps 400 `malformedBody`, of too many 413 `batchTooLarge`; and
/// for every tap
/// - a valid one is a click that consumers of `islet.clicks.v1` read back as itself, with the id
///   of its URL and tap time;
/// - a rejected one names an input field and a known reason, and its record, which consumers of
///   `islet.clicks-rejected.v1` read back as itself, keeps at most the documented bytes of the URL
///   and the versions.
public enum IngestChecks {
    static let settings = IngestSettings(keyring: LinkChecks.keyring)
    static let verifier = TapVerifier(keyring: settings.keyring, maxTapAge: settings.maxTapAge)
    /// When the taps arrive: a minute after the seeds' taps.
    static let receivedAt = LinkChecks.tapped.addingTimeInterval(60)

    /// Checks one input; traps when a property does not hold.
    public static func check(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let body = Array(bytes.dropFirst())
        let taps: [TapInput]
        do throws(IngestAPIError) {
            if first.isMultiple(of: 2) {
                taps = [try IngestBody.decode(TapInput.self, from: body)]
            } else {
                let batch = try IngestBody.decode(TapBatch.self, from: body)
                do throws(IngestAPIError) {
                    try IngestBody.check(batch, maxBatch: settings.maxBatch)
                } catch {
                    let expected = batch.taps.isEmpty ? (400, "malformedBody") : (413, "batchTooLarge")
                    require(
                        error.status.code == expected.0 && error.code.rawValue == expected.1 && error.field == "taps",
                        "a batch of \(batch.taps.count) taps is refused with \(error)")
                    return
                }
                taps = batch.taps
            }
        } catch {
            require(
                error.status.code == 400 && error.code == "malformedBody" && !error.reason.isEmpty,
                "\(quoted(body)) does not decode, and the answer is not a clear 400 malformedBody: \(error)")
            return
        }
        for tap in taps {
            check(tap, verifier.check(tap, receivedAt: receivedAt, clientId: "203.0.113.7"))
        }
    }

    static func check(_ tap: TapInput, _ outcome: TapVerifier.Outcome) {
        switch outcome {
        case .valid(let click, _):
            require(MessageChecks.rewritten(click) == click, "the click of \(tap) does not read back as itself")
            require(
                tap.url.flatMap { TapVerifier.clickId(url: $0, tappedAt: click.tappedAt, keyring: verifier.keyring, receivedAt: receivedAt) } == click.clickId
                    && click.receivedAt == receivedAt,
                "the click of \(tap) has another id or time of receipt: \(click)")
        case .invalid(let rejected, let field):
            require(["url", "tappedAt", "appVersion", "osVersion"].contains(field), "the rejection of \(tap) names no input field: \(field)")
            require(rejected.reason.isKnown && !rejected.detail.isEmpty, "the rejection of \(tap) has no clear reason: \(rejected)")
            require(MessageChecks.rewritten(rejected) == rejected, "the rejected record of \(tap) does not read back as itself")
            require(rejected.url.utf8.count <= RejectedClick.maximumUrlBytes, "the rejected record of \(tap) keeps a longer URL than documented")
            for version in [rejected.appVersion, rejected.osVersion] {
                require(
                    (version?.utf8.count ?? 0) <= TapVerifier.maximumVersionBytes,
                    "the rejected record of \(tap) keeps a version of \(version?.utf8.count ?? 0) bytes")
            }
        }
    }
}
