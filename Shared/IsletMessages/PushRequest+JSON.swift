import Foundation

/// A push request's JSON members, listed once: its own writer and its own reader both follow this
/// list (the content-service writes every request, the dispatcher reads every one).
extension PushRequest: IsletJSONMemberList, IsletJSONWritable, IsletJSONReadable {
    static var unread: PushRequest {
        PushRequest(
            requestId: "", event: .update, app: AppTarget(bundleId: "", environment: .production), attributesType: "", payload: "", priority: 0,
            urgency: .routine, supersedable: false, alerting: false, apnsTimestamp: 0, contentSequence: 0, createdAt: Date(timeIntervalSince1970: 0))
    }

    mutating func members(_ visitor: inout some IsletJSONMemberVisitor) {
        visitor.string("activityId", &activityId)
        visitor.bool("alerting", &alerting)
        visitor.integer("apnsTimestamp", &apnsTimestamp)
        visitor.object("app", &app)
        visitor.string("attributesType", &attributesType)
        visitor.string("channelId", &channelId)
        visitor.integer("channelStoragePolicy", &channelStoragePolicy)
        visitor.integer("contentSequence", &contentSequence)
        visitor.date("createdAt", &createdAt)
        visitor.string("deviceId", &deviceId)
        visitor.open("event", &event)
        visitor.date("expiration", &expiration)
        visitor.string("payload", &payload)
        visitor.integer("priority", &priority)
        visitor.string("pushToStartKey", &pushToStartKey)
        visitor.string("requestId", &requestId)
        visitor.integer("schemaVersion", &schemaVersion)
        visitor.string("sourceActivityId", &sourceActivityId)
        visitor.string("sourceEventId", &sourceEventId)
        visitor.date("staleDate", &staleDate)
        visitor.string("startGroup", &startGroup)
        visitor.string("state", &state)
        visitor.bool("supersedable", &supersedable)
        visitor.date("tokenRegisteredAt", &tokenRegisteredAt)
        visitor.open("urgency", &urgency)
        visitor.string("widgetKey", &widgetKey)
    }

    public func writeJSON(into out: inout [UInt8]) { IsletJSONMemberWriter.write(self, into: &out) }

    public init?(json: JSONValue) {
        guard let request = IsletJSONMemberReader.read(Self.self, from: json) else { return nil }
        self = request
    }
}
