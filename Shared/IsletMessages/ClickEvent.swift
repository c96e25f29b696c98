import Foundation

/// A verified tap on a live activity, on `islet.clicks.v1`.
///
/// The widget can only open URLs; content-service signs analytics parameters into each of them,
/// and analytics-ingest writes this event once the signature checks out, so every field here
/// except the times of receipt comes from a URL Islet itself made. Repeated deliveries of one tap
/// share a `clickId`. Written by analytics-ingest; read by analytics teams.
public struct ClickEvent: IsletMessage {
    public static let currentSchemaVersion = 1
    public static let topic = IsletTopics.clicks

    public var schemaVersion: Int
    /// A deterministic id of the tap (same URL, same tap time: same id), for dedupe.
    public var clickId: String
    /// The activity tapped.
    public var activityId: String
    /// The Swift type name of the widget's `ActivityAttributes`.
    public var attributesType: String
    /// Where on the device the activity was tapped.
    public var surface: Surface
    /// Which link or button of the layout was tapped, as named by the widget (e.g. `trackOrder`).
    public var element: String
    /// The sequence of the content the user saw when tapping: tells which update they reacted to.
    public var contentSequence: Int64
    /// The app, when the link says it.
    public var app: AppTarget?
    /// The app's version, as reported by the app.
    public var appVersion: String
    /// The iOS version, as reported by the app.
    public var osVersion: String
    /// The id of the key the link was signed with.
    public var keyId: String
    /// When content-service signed the link.
    public var issuedAt: Date
    /// When the user tapped, by the device's clock.
    public var tappedAt: Date
    /// When analytics-ingest received the tap.
    public var receivedAt: Date

    public init(
        clickId: String, activityId: String, attributesType: String, surface: Surface, element: String, contentSequence: Int64,
        app: AppTarget? = nil, appVersion: String, osVersion: String, keyId: String, issuedAt: Date, tappedAt: Date,
        receivedAt: Date, schemaVersion: Int = Self.currentSchemaVersion
    ) {
        self.schemaVersion = schemaVersion
        self.clickId = clickId
        self.activityId = activityId
        self.attributesType = attributesType
        self.surface = surface
        self.element = element
        self.contentSequence = contentSequence
        self.app = app
        self.appVersion = appVersion
        self.osVersion = osVersion
        self.keyId = keyId
        self.issuedAt = issuedAt
        self.tappedAt = tappedAt
        self.receivedAt = receivedAt
    }

    /// The activity id.
    public var key: String? { MessageKey.activity(activityId) }

    public func validate() throws(MessageValidationError) {
        guard !activityId.isEmpty else {
            throw MessageValidationError(field: "activityId", problem: "must not be empty")
        }
    }
}
