import Foundation

/// A type that writes its own JSON: byte for byte what ``IsletJSON/encode(_:)``'s encoder writes
/// for it (keys sorted, absent optionals left out, dates in ``IsletDate``'s form), without the
/// encoder's boxing of every field. For messages written once per request on a hot path
/// (analytics-ingest's clicks and answers, content-service's push requests, apns-dispatcher's outcomes); ``IsletJSON/encode(_:)`` takes this path for them, and
/// tests hold each writer to the encoder's bytes.
public protocol IsletJSONWritable {
    func writeJSON(into out: inout [UInt8])
}

extension AppTarget: IsletJSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        var object = IsletJSONObject()
        object.string("bundleId", bundleId, into: &out)
        object.string("environment", environment.rawValue, into: &out)
        object.end(into: &out)
    }
}

extension ClickEvent: IsletJSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        var object = IsletJSONObject()
        object.string("activityId", activityId, into: &out)
        object.object("app", app, into: &out)
        object.string("appVersion", appVersion, into: &out)
        object.string("attributesType", attributesType, into: &out)
        object.string("clickId", clickId, into: &out)
        object.integer("contentSequence", contentSequence, into: &out)
        object.string("element", element, into: &out)
        object.date("issuedAt", issuedAt, into: &out)
        object.string("keyId", keyId, into: &out)
        object.string("osVersion", osVersion, into: &out)
        object.date("receivedAt", receivedAt, into: &out)
        object.integer("schemaVersion", Int64(schemaVersion), into: &out)
        object.string("surface", surface.rawValue, into: &out)
        object.date("tappedAt", tappedAt, into: &out)
        object.end(into: &out)
    }
}

extension PushOutcome.APNsResponse: IsletJSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        var object = IsletJSONObject()
        object.string("apnsId", apnsId, into: &out)
        object.string("reason", reason, into: &out)
        object.integer("status", Int64(status), into: &out)
        object.date("timestamp", timestamp, into: &out)
        object.string("uniqueId", uniqueId, into: &out)
        object.end(into: &out)
    }
}

extension PushOutcome: IsletJSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        var object = IsletJSONObject()
        object.string("activityId", activityId, into: &out)
        object.string("announcementId", announcementId, into: &out)
        object.object("apns", apns, into: &out)
        object.integer("apnsTimestamp", apnsTimestamp, into: &out)
        object.integer("attempts", Int64(attempts), into: &out)
        object.string("attributesType", attributesType, into: &out)
        object.string("bundleId", bundleId, into: &out)
        object.string("channelId", channelId, into: &out)
        object.date("completedAt", completedAt, into: &out)
        object.integer("contentSequence", contentSequence, into: &out)
        object.string("detail", detail, into: &out)
        object.string("deviceId", deviceId, into: &out)
        object.number("latencyMilliseconds", latencyMilliseconds, into: &out)
        object.integer("priorityUsed", priorityUsed, into: &out)
        object.string("pushToStartKey", pushToStartKey, into: &out)
        object.string("requestId", requestId, into: &out)
        object.string("result", result.rawValue, into: &out)
        object.integer("schemaVersion", Int64(schemaVersion), into: &out)
        object.string("startActivityId", startActivityId, into: &out)
        object.string("supersededBy", supersededBy, into: &out)
        object.string("tokenFingerprint", tokenFingerprint, into: &out)
        object.string("widgetKey", widgetKey, into: &out)
        object.end(into: &out)
    }
}
