import Foundation

/// A broadcast channel (iOS 18) apns-dispatcher made for an activity that many phones watch alike
/// (a match), on `islet.broadcast-channels.v1` (compacted, co-partitioned with the activity
/// topics, keyed like the activity): one push to the channel updates every activity subscribed
/// to it.
///
/// The dispatcher that owns the activity's partition makes the channel with APNs on the activity's
/// first broadcast request, writes this record before sending on it, and reuses it from then on
/// (a partition's next owner reads the record when the partition is assigned: it never makes a
/// second channel for the activity). Once the activity's `end` is delivered it writes the time it
/// will delete the channel (``deleteAt``), and after deleting it a last record with ``deletedAt``.
/// An app reads ``channelId`` to start its activity on the channel (`input-push-channel`).
public struct BroadcastChannelRecord: IsletMessage {
    public static let currentSchemaVersion = 1
    public static let topic = IsletTopics.broadcastChannels

    public var schemaVersion: Int
    /// The app and APNs environment the channel belongs to (a channel never crosses environments).
    public var app: AppTarget
    /// The activity every subscriber shows (the match).
    public var activityId: String
    /// The id APNs gave the channel (`apns-channel-id`): base64, of no fixed size.
    public var channelId: String
    /// `message-storage-policy`: 0 no message stored (more broadcasts allowed: scores), 1 the most
    /// recent message stored for phones that were offline (at most 8 hours).
    public var storagePolicy: Int
    public var createdAt: Date
    /// When the activity's `end` was delivered on the channel.
    public var endedAt: Date?
    /// When the dispatcher deletes the channel (some hours after ``endedAt``).
    public var deleteAt: Date?
    /// When APNs deleted it: nothing can be sent on it any more.
    public var deletedAt: Date?
    /// When the record was written.
    public var writtenAt: Date

    public init(
        app: AppTarget, activityId: String, channelId: String, storagePolicy: Int, createdAt: Date, endedAt: Date? = nil, deleteAt: Date? = nil,
        deletedAt: Date? = nil, writtenAt: Date, schemaVersion: Int = Self.currentSchemaVersion
    ) {
        self.schemaVersion = schemaVersion
        self.app = app
        self.activityId = activityId
        self.channelId = channelId
        self.storagePolicy = storagePolicy
        self.createdAt = createdAt
        self.endedAt = endedAt
        self.deleteAt = deleteAt
        self.deletedAt = deletedAt
        self.writtenAt = writtenAt
    }

    /// `<bundleId>/<activityId>`: the key of the activity's other records.
    public var key: String? { MessageKey.activity(bundleId: app.bundleId, activityId: activityId) }

    public func validate() throws(MessageValidationError) {
        try MessageKey.requireBundleId(app.bundleId)
        try app.environment.requireKnown(field: "app.environment")
        guard !activityId.isEmpty else { throw MessageValidationError(field: "activityId", problem: "must not be empty") }
        try MessageKey.requireActivityId(activityId)
        guard !channelId.isEmpty, Data(base64Encoded: channelId) != nil else {
            throw MessageValidationError(field: "channelId", problem: "must be APNs's channel id (base64)")
        }
        guard storagePolicy == 0 || storagePolicy == 1 else {
            throw MessageValidationError(field: "storagePolicy", problem: "must be 0 or 1 (is \(storagePolicy))")
        }
    }
}
