import Foundation

/// apns-dispatcher's changelog of budgets, on `islet.dispatch-budgets.v1` (compacted,
/// co-partitioned with the activity topics): what is left of an activity's priority-10 budget, or
/// of a device's push-to-start budget, so that the instance a partition moves to goes on spending
/// the same budget instead of a full one (APNs keeps counting per activity and device, whichever
/// instance sends).
///
/// Exactly one of ``activityId`` and ``deviceId`` is set; ``activityDeviceId`` names, with
/// ``activityId``, the budget of one more device of an activity (its copies' key,
/// ``MessageKey/device(bundleId:activityId:deviceId:)``: APNs counts per activity on each device). The instance that owns a partition of
/// `islet.push-requests.v1` writes, every few seconds and when the partition is revoked, the
/// budgets its requests spent that changed, to the same partition number; a budget full again
/// gets a tombstone (a `null` value): a full budget is what an instance assumes when it knows
/// none. A device's budget is written to the partition of the push-to-start request that spent it
/// (a device's push-to-starts may sit in several partitions: each holds the budget as its last
/// writer saw it, and a reader keeps the most spent). Nothing but the dispatcher reads it.
public struct DispatchBudgetRecord: IsletMessage {
    public static let currentSchemaVersion = 1
    public static let topic = IsletTopics.dispatchBudgets

    public var schemaVersion: Int
    public var bundleId: String
    /// An activity's priority-10 budget.
    public var activityId: String?
    /// A device's push-to-start budget.
    public var deviceId: String?
    /// With ``activityId``: the activity's budget on this one more device of it. Absent for the
    /// activity's own (additive).
    public var activityDeviceId: String?
    /// The partition of the requests that spent it (the one it is written to).
    public var partition: Int32
    /// Sends left at ``updatedAt`` (fractional: the budget refills continuously).
    public var available: Double
    /// The budget's size and how long it takes to refill it whole.
    public var capacity: Int
    public var periodSeconds: Double
    public var updatedAt: Date
    /// Since when a critical update has been waiting for this budget.
    public var waitingSince: Date?
    /// When the record was written.
    public var writtenAt: Date

    public init(
        bundleId: String, activityId: String? = nil, deviceId: String? = nil, partition: Int32, available: Double, capacity: Int,
        periodSeconds: Double, updatedAt: Date, waitingSince: Date? = nil, writtenAt: Date, activityDeviceId: String? = nil,
        schemaVersion: Int = Self.currentSchemaVersion
    ) {
        self.activityDeviceId = activityDeviceId
        self.schemaVersion = schemaVersion
        self.bundleId = bundleId
        self.activityId = activityId
        self.deviceId = deviceId
        self.partition = partition
        self.available = available
        self.capacity = capacity
        self.periodSeconds = periodSeconds
        self.updatedAt = updatedAt
        self.waitingSince = waitingSince
        self.writtenAt = writtenAt
    }

    /// `<bundleId>/<activityId>` for an activity's budget (`<bundleId>/<activityId>/<deviceId>` on
    /// one more device of it), `<bundleId>:<deviceId>` for a device's push-to-start budget.
    public var key: String? {
        if let activityId, let activityDeviceId { return MessageKey.device(bundleId: bundleId, activityId: activityId, deviceId: activityDeviceId) }
        if let activityId { return MessageKey.activity(bundleId: bundleId, activityId: activityId) }
        return deviceId.map { Self.deviceKey(bundleId: bundleId, deviceId: $0) }
    }

    /// The key of a device's push-to-start budget.
    public static func deviceKey(bundleId: String, deviceId: String) -> String { "\(bundleId):\(deviceId)" }

    public func validate() throws(MessageValidationError) {
        guard (activityId == nil) != (deviceId == nil) else {
            throw MessageValidationError(field: "activityId", problem: "exactly one of activityId and deviceId must be set")
        }
        try MessageKey.requireBundleId(bundleId, field: "bundleId")
        if let activityId { try MessageKey.requireActivityId(activityId) }
        if let activityDeviceId {
            guard activityId != nil else {
                throw MessageValidationError(field: "activityDeviceId", problem: "names a device of an activity: activityId is required")
            }
            guard !activityDeviceId.isEmpty else { throw MessageValidationError(field: "activityDeviceId", problem: "must not be empty") }
            try MessageKey.requireDeviceId(activityDeviceId, field: "activityDeviceId")
        }
        guard capacity >= 1 else { throw MessageValidationError(field: "capacity", problem: "must be at least 1") }
        guard periodSeconds > 0, periodSeconds.isFinite else { throw MessageValidationError(field: "periodSeconds", problem: "must be positive") }
        guard available >= 0, available <= Double(capacity) else {
            throw MessageValidationError(field: "available", problem: "must be between 0 and capacity")
        }
    }
}
