import Foundation

/// content-service's changelog, on `islet.content-memory.v1` (compacted, co-partitioned with the
/// activity topics): what it remembers of an activity between events, or a partition's checkpoint.
///
/// Exactly one of ``activity`` and ``checkpoint`` is set. The instance that owns an activity
/// partition writes the memory of each activity that changed, under the activity's key, to the
/// same partition number; then a ``checkpoint`` under the key `checkpoint`: every record of
/// `islet.push-requests.v1` and `islet.push-outcomes.v1` before its positions is reflected in the
/// partition's memories. The instance a partition is assigned to reads that partition of the
/// changelog to its end, then those topics from its checkpoint on: seconds of records, not hours. A forgotten activity gets a tombstone (a `null`
/// value). Nothing but content-service reads it: the fields may change with a new schema version.
public struct ContentMemoryRecord: IsletMessage {
    public static let currentSchemaVersion = 1
    public static let topic = IsletTopics.contentMemory
    /// The key of a partition's checkpoint.
    public static let checkpointKey = "checkpoint"

    /// One activity's memory.
    public struct Activity: Codable, Sendable, Equatable {
        public var bundleId: String
        public var activityId: String
        /// The partition of the activity's records (events, requests, this changelog).
        public var partition: Int32
        /// The highest event sequence applied.
        public var lastSequence: Int64?
        /// The last `aps.timestamp` sent.
        public var lastTimestamp: Int64?
        /// The state of the last content sent.
        public var lastState: String?
        /// When alerts were sent, within the alert window.
        public var alertTimes: [Date]?
        public var startedAt: Date?
        public var ended: Bool
        /// What is kept of the last request sent; the request itself is on `islet.push-requests.v1`
        /// at ``payloadStoredAt`` (read again from there when it is to be re-sent).
        public var latest: Latest?
        public var payloadStoredAt: Position?
        /// The latest payload was not found where it was stored.
        public var payloadLost: Bool?
        /// The dispatcher's answers to the activity's recent requests.
        public var outcomes: [Outcome]?
        /// Where the dispatcher's latest answers to the activity's requests are on
        /// `islet.push-outcomes.v1`, the latest first (at most 4): read again from there when a
        /// backend asks for them.
        public var outcomePositions: [Position]?
        /// The request of the latest event's content, and its re-sends so far.
        public var contentRequestId: String?
        public var resends: Int
        public var lastResendAt: Date?
        /// APNs declared the activity's token dead: when, and the token's fingerprint.
        public var gone: Bool
        public var goneAt: Date?
        public var goneToken: String?
        /// The image URLs whose data reached the phone inline.
        public var inlinedImages: [String]?
        /// Images inlined in requests whose outcome has not come yet.
        public var pendingImages: [PendingImages]?
        /// The push-to-start key the live activity was started with (its token stands for the
        /// activity's own until that is read).
        public var startedWith: String?
        /// Events scheduled for later (``ActivityEvent/at``), the earliest first: an event that
        /// schedules one counts as processed only once a record holding it is written.
        public var steps: [ActivityEvent]?
        /// The push-to-start APNs accepted that started the activity, while no update token of it
        /// has come (the start's watchdog, ``PushResult/startUnconfirmed``). Absent otherwise, and
        /// in records written before it existed (additive).
        public var startWatch: StartWatch?
        /// The activity's broadcast channel (iOS 18), from the dispatcher's answers to its
        /// broadcasts: a push-to-start of the activity to a phone names it
        /// (``PushRequest/channelId``). Absent for activities sent to tokens, and in records written
        /// before it existed (additive).
        public var channelId: String?

        public init(
            bundleId: String, activityId: String, partition: Int32, lastSequence: Int64? = nil, lastTimestamp: Int64? = nil,
            lastState: String? = nil, alertTimes: [Date]? = nil, startedAt: Date? = nil, ended: Bool = false, latest: Latest? = nil,
            payloadStoredAt: Position? = nil, payloadLost: Bool? = nil, outcomes: [Outcome]? = nil, contentRequestId: String? = nil,
            resends: Int = 0, lastResendAt: Date? = nil, gone: Bool = false, goneAt: Date? = nil, goneToken: String? = nil,
            inlinedImages: [String]? = nil, pendingImages: [PendingImages]? = nil, outcomePositions: [Position]? = nil,
            startedWith: String? = nil, steps: [ActivityEvent]? = nil, startWatch: StartWatch? = nil, channelId: String? = nil
        ) {
            self.channelId = channelId
            self.steps = steps
            self.startWatch = startWatch
            self.bundleId = bundleId
            self.activityId = activityId
            self.partition = partition
            self.lastSequence = lastSequence
            self.lastTimestamp = lastTimestamp
            self.lastState = lastState
            self.alertTimes = alertTimes
            self.startedAt = startedAt
            self.ended = ended
            self.latest = latest
            self.payloadStoredAt = payloadStoredAt
            self.payloadLost = payloadLost
            self.outcomes = outcomes
            self.contentRequestId = contentRequestId
            self.resends = resends
            self.lastResendAt = lastResendAt
            self.gone = gone
            self.goneAt = goneAt
            self.goneToken = goneToken
            self.inlinedImages = inlinedImages
            self.pendingImages = pendingImages
            self.outcomePositions = outcomePositions
            self.startedWith = startedWith
        }
    }

    /// Where a record is: a partition of a topic, and an offset in it.
    public struct Position: Codable, Sendable, Hashable {
        public var topic: String?
        public var partition: Int32
        public var offset: Int64

        public init(topic: String? = nil, partition: Int32, offset: Int64) {
            self.topic = topic
            self.partition = partition
            self.offset = offset
        }
    }

    /// What the memory keeps of an activity's latest request.
    public struct Latest: Codable, Sendable, Hashable {
        public var requestId: String
        public var event: ActivityEventKind
        public var app: AppTarget
        public var attributesType: String
        public var createdAt: Date
        public var staleDate: Date?
        public var contentSequence: Int64
        /// It carried an event's content (not a re-send or an end the service made by itself).
        public var content: Bool
        /// Set when it was a push-to-start.
        public var pushToStartKey: String?
        /// `true` when it was a push-to-start to every device of a user (``PushRequest/startGroup``):
        /// it may have started the activity on another device, whatever its own outcome.
        public var userStart: Bool?

        enum CodingKeys: String, CodingKey {
            case requestId, event, app, attributesType, createdAt, staleDate, contentSequence, content, pushToStartKey, userStart
            /// The first version of this record held the whole request here (it has a `payload`):
            /// it carried an event's content when it had a `sourceEventId`.
            case sourceEventId, payload
        }

        public init(from decoder: any Decoder) throws {
            let container = try decoder.container(keyedBy: CodingKeys.self)
            requestId = try container.decode(String.self, forKey: .requestId)
            event = try container.decode(ActivityEventKind.self, forKey: .event)
            app = try container.decode(AppTarget.self, forKey: .app)
            attributesType = try container.decode(String.self, forKey: .attributesType)
            createdAt = try container.decode(Date.self, forKey: .createdAt)
            staleDate = try container.decodeIfPresent(Date.self, forKey: .staleDate)
            contentSequence = try container.decode(Int64.self, forKey: .contentSequence)
            pushToStartKey = try container.decodeIfPresent(String.self, forKey: .pushToStartKey)
            userStart = try container.decodeIfPresent(Bool.self, forKey: .userStart)
            if !container.contains(.content), container.contains(.payload) {
                content = try container.decodeIfPresent(String.self, forKey: .sourceEventId) != nil
            } else {
                content = try container.decode(Bool.self, forKey: .content)
            }
        }

        public func encode(to encoder: any Encoder) throws {
            var container = encoder.container(keyedBy: CodingKeys.self)
            try container.encode(requestId, forKey: .requestId)
            try container.encode(event, forKey: .event)
            try container.encode(app, forKey: .app)
            try container.encode(attributesType, forKey: .attributesType)
            try container.encode(createdAt, forKey: .createdAt)
            try container.encodeIfPresent(staleDate, forKey: .staleDate)
            try container.encode(contentSequence, forKey: .contentSequence)
            try container.encode(content, forKey: .content)
            try container.encodeIfPresent(pushToStartKey, forKey: .pushToStartKey)
            try container.encodeIfPresent(userStart, forKey: .userStart)
        }

        public init(
            requestId: String, event: ActivityEventKind, app: AppTarget, attributesType: String, createdAt: Date, staleDate: Date? = nil,
            contentSequence: Int64, content: Bool, pushToStartKey: String? = nil, userStart: Bool? = nil
        ) {
            self.requestId = requestId
            self.event = event
            self.app = app
            self.attributesType = attributesType
            self.createdAt = createdAt
            self.staleDate = staleDate
            self.contentSequence = contentSequence
            self.content = content
            self.pushToStartKey = pushToStartKey
            self.userStart = userStart
        }
    }

    /// A delivered push-to-start waiting for its activity's update token.
    public struct StartWatch: Codable, Sendable, Hashable {
        /// The start's request id.
        public var requestId: String
        /// The push-to-start key it went to (`<bundleId>/<deviceId>/<attributesType>`).
        public var pushToStartKey: String
        /// The ``TokenFingerprint`` of the push-to-start token it went to, when its outcome named it.
        public var tokenFingerprint: String?
        /// When APNs accepted it (its `delivered` outcome's `completedAt`).
        public var deliveredAt: Date
        /// When `startUnconfirmed` was written for it; absent until then.
        public var reportedAt: Date?

        public init(requestId: String, pushToStartKey: String, tokenFingerprint: String?, deliveredAt: Date, reportedAt: Date? = nil) {
            self.requestId = requestId
            self.pushToStartKey = pushToStartKey
            self.tokenFingerprint = tokenFingerprint
            self.deliveredAt = deliveredAt
            self.reportedAt = reportedAt
        }
    }

    public struct Outcome: Codable, Sendable, Hashable {
        public var requestId: String
        public var result: PushResult
        /// When it came: set on an outcome whose request was not read yet (kept a while for it).
        public var completedAt: Date?

        public init(requestId: String, result: PushResult, completedAt: Date? = nil) {
            self.requestId = requestId
            self.result = result
            self.completedAt = completedAt
        }
    }

    public struct PendingImages: Codable, Sendable, Hashable {
        public var requestId: String
        public var urls: [String]
        public var since: Date

        public init(requestId: String, urls: [String], since: Date) {
            self.requestId = requestId
            self.urls = urls
            self.since = since
        }
    }

    /// How far the records behind a partition's memories were read when they were written.
    public struct Checkpoint: Codable, Sendable, Hashable {
        /// The changelog partition it is about (the one it is written to).
        public var partition: Int32
        /// For each partition of `islet.push-requests.v1` and `islet.push-outcomes.v1` read, the
        /// next offset to read: every record before it is reflected in this partition's memories.
        public var positions: [Position]

        public init(partition: Int32, positions: [Position]) {
            self.partition = partition
            self.positions = positions
        }
    }

    public var schemaVersion: Int
    public var activity: Activity?
    public var checkpoint: Checkpoint?
    /// When the record was written.
    public var writtenAt: Date

    public init(activity: Activity, writtenAt: Date, schemaVersion: Int = Self.currentSchemaVersion) {
        self.schemaVersion = schemaVersion
        self.activity = activity
        self.writtenAt = writtenAt
    }

    public init(checkpoint: Checkpoint, writtenAt: Date, schemaVersion: Int = Self.currentSchemaVersion) {
        self.schemaVersion = schemaVersion
        self.checkpoint = checkpoint
        self.writtenAt = writtenAt
    }

    /// The activity of its app (`<bundleId>/<activityId>`), or `checkpoint`.
    public var key: String? {
        if let activity { return MessageKey.activity(bundleId: activity.bundleId, activityId: activity.activityId) }
        return Self.checkpointKey
    }

    public func validate() throws(MessageValidationError) {
        guard (activity == nil) != (checkpoint == nil) else {
            throw MessageValidationError(field: "activity", problem: "exactly one of activity and checkpoint must be set")
        }
        if let activity {
            try MessageKey.requireBundleId(activity.bundleId, field: "activity.bundleId")
            try MessageKey.requireActivityId(activity.activityId, field: "activity.activityId")
        }
        if let checkpoint, checkpoint.positions.contains(where: { $0.topic == nil || $0.offset < 0 }) {
            throw MessageValidationError(field: "checkpoint.positions", problem: "each position names its topic, and its offset is not negative")
        }
    }
}
