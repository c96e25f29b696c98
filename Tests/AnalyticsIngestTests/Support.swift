import Foundation
import IsletLinks
import IsletMessages
import IsletTesting
import Logging
import Synchronization
import Testing
@testable import AnalyticsIngest

let quietLogger = testLogger("islet.test.analytics", level: .critical)

enum TestLinks {
    static let k1 = try! LinkKey(id: "k1", secret: Array("the-first-link-key-at-least-32-bytes!".utf8))
    static let k2 = try! LinkKey(id: "k2", secret: Array("the-second-link-key-at-least-32-byte!".utf8))
    /// A key analytics-ingest does not accept.
    static let stranger = try! LinkKey(id: "k9", secret: Array("a-key-nobody-configured-anywhere-here".utf8))
    static let keyring = LinkKeyring(signing: k2, accepted: [k1])
    static let issued = Date(timeIntervalSince1970: 1_795_000_000)
    /// When the server receives taps in these tests.
    static let now = issued.addingTimeInterval(600)

    /// The app content-service signs the links for.
    static let food = AppTarget(bundleId: "com.example.food", environment: .production)

    /// A link's target; `app: nil` for a link signed before links named their app.
    static func target(
        _ activity: String = "order-42", surface: Surface = .islandExpanded, element: String = "eta", sequence: Int64 = 7, app: AppTarget? = food
    ) -> TapTarget {
        TapTarget(activityId: activity, attributesType: "DeliveryAttributes", surface: surface, element: element, contentSequence: sequence, app: app)
    }

    static func url(_ target: TapTarget = target(), key: LinkKey = k2, issuedAt: Date = issued, base: String = "fooddelivery://order/42?tab=status")
        -> String
    {
        try! DeepLinkCodec.sign(baseURL: base, target: target, issuedAt: issuedAt, key: key)
    }

    static func tap(_ url: String = url(), tappedAt: Date = issued.addingTimeInterval(120), appVersion: String? = "5.2.0", osVersion: String? = "18.1")
        -> TapInput
    {
        TapInput(url: url, tappedAt: IsletDate.format(tappedAt), appVersion: appVersion, osVersion: osVersion)
    }
}

/// A publisher that keeps what it was given and can be told to refuse (Kafka down).
final class RecordingPublisher: TapPublisher {
    private let state = Mutex<(records: [TapRecord], refusing: Bool)>(([], false))

    var records: [TapRecord] { state.withLock { $0.records } }
    var clicks: [ClickEvent] { records.compactMap { if case .click(let c) = $0 { c } else { nil } } }
    var rejected: [RejectedClick] { records.compactMap { if case .rejected(let r) = $0 { r } else { nil } } }
    func refuse(_ refusing: Bool) { state.withLock { $0.refusing = refusing } }

    func publish(_ records: [TapRecord]) async -> [(any Error)?] {
        state.withLock { state in
            if state.refusing { return records.map { _ in TestKafkaDown() } }
            state.records += records
            return records.map { _ in nil }
        }
    }
}

struct TestKafkaDown: Error {}

