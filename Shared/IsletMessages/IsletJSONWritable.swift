import Foundation

/// A type that writes its own JSON: byte for byte what ``IsletJSON/encode(_:)``'s encoder writes
/// for it (keys sorted, absent optionals left out, dates in ``IsletDate``'s form), without the
/// encoder's boxing of every field. For messages written once per request on a hot path
/// (analytics-ingest's clicks and answers, content-service's push requests, apns-dispatcher's outcomes); ``IsletJSON/encode(_:)`` takes this path for them, and
/// tests hold each writer to the encoder's bytes.
public protocol IsletJSONWritable {
    func writeJSON(into out: inout [UInt8])
}

/// Writes one JSON object's members, which the caller gives in the encoder's sorted key order.
public struct IsletJSONObject {
    private var empty = true

    public init() {}

    /// The key of the next member (the caller then writes its value).
    public mutating func key(_ name: String, into out: inout [UInt8]) {
        out.append(empty ? UInt8(ascii: "{") : UInt8(ascii: ","))
        empty = false
        JSONValue.writeString(name, into: &out)
        out.append(UInt8(ascii: ":"))
    }

    public mutating func string(_ name: String, _ value: String?, into out: inout [UInt8]) {
        guard let value else { return }
        key(name, into: &out)
        JSONValue.writeString(value, into: &out)
    }

    public mutating func integer(_ name: String, _ value: Int64, into out: inout [UInt8]) {
        key(name, into: &out)
        out.append(contentsOf: String(value).utf8)
    }

    public mutating func integer(_ name: String, _ value: Int?, into out: inout [UInt8]) {
        guard let value else { return }
        integer(name, Int64(value), into: &out)
    }

    public mutating func integer(_ name: String, _ value: Int64?, into out: inout [UInt8]) {
        guard let value else { return }
        integer(name, value, into: &out)
    }

    /// A `Double` as the encoder writes it (``JSONValue/writeNumber(_:into:)``).
    public mutating func number(_ name: String, _ value: Double?, into out: inout [UInt8]) {
        guard let value else { return }
        key(name, into: &out)
        JSONValue.writeNumber(value, into: &out)
    }

    public mutating func bool(_ name: String, _ value: Bool, into out: inout [UInt8]) {
        key(name, into: &out)
        out.append(contentsOf: (value ? "true" : "false").utf8)
    }

    public mutating func date(_ name: String, _ value: Date?, into out: inout [UInt8]) {
        guard let value else { return }
        date(name, value, into: &out)
    }

    public mutating func date(_ name: String, _ value: Date, into out: inout [UInt8]) {
        key(name, into: &out)
        JSONValue.writeString(IsletDate.format(value), into: &out)
    }

    public mutating func object(_ name: String, _ value: (some IsletJSONWritable)?, into out: inout [UInt8]) {
        guard let value else { return }
        key(name, into: &out)
        value.writeJSON(into: &out)
    }

    /// Closes the object (`{}` when it has no member).
    public func end(into out: inout [UInt8]) {
        if empty { out.append(UInt8(ascii: "{")) }
        out.append(UInt8(ascii: "}"))
    }
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

extension PushRequest: IsletJSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        var object = IsletJSONObject()
        object.string("activityId", activityId, into: &out)
        object.bool("alerting", alerting, into: &out)
        object.integer("apnsTimestamp", apnsTimestamp, into: &out)
        object.object("app", app, into: &out)
        object.string("attributesType", attributesType, into: &out)
        object.integer("channelStoragePolicy", channelStoragePolicy, into: &out)
        object.integer("contentSequence", contentSequence, into: &out)
        object.date("createdAt", createdAt, into: &out)
        object.string("event", event.rawValue, into: &out)
        object.date("expiration", expiration, into: &out)
        object.string("payload", payload, into: &out)
        object.integer("priority", Int64(priority), into: &out)
        object.string("pushToStartKey", pushToStartKey, into: &out)
        object.string("requestId", requestId, into: &out)
        object.integer("schemaVersion", Int64(schemaVersion), into: &out)
        object.string("sourceActivityId", sourceActivityId, into: &out)
        object.string("sourceEventId", sourceEventId, into: &out)
        object.date("staleDate", staleDate, into: &out)
        object.string("state", state, into: &out)
        object.bool("supersedable", supersedable, into: &out)
        object.date("tokenRegisteredAt", tokenRegisteredAt, into: &out)
        object.string("urgency", urgency.rawValue, into: &out)
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
        object.end(into: &out)
    }
}

extension PushOutcome: IsletJSONWritable {
    public func writeJSON(into out: inout [UInt8]) {
        var object = IsletJSONObject()
        object.string("activityId", activityId, into: &out)
        object.string("announcementId", announcementId, into: &out)
        object.object("apns", apns, into: &out)
        object.integer("attempts", Int64(attempts), into: &out)
        object.string("attributesType", attributesType, into: &out)
        object.string("bundleId", bundleId, into: &out)
        object.string("channelId", channelId, into: &out)
        object.date("completedAt", completedAt, into: &out)
        object.integer("contentSequence", contentSequence, into: &out)
        object.string("detail", detail, into: &out)
        object.number("latencyMilliseconds", latencyMilliseconds, into: &out)
        object.integer("priorityUsed", priorityUsed, into: &out)
        object.string("pushToStartKey", pushToStartKey, into: &out)
        object.string("requestId", requestId, into: &out)
        object.string("result", result.rawValue, into: &out)
        object.integer("schemaVersion", Int64(schemaVersion), into: &out)
        object.string("supersededBy", supersededBy, into: &out)
        object.string("tokenFingerprint", tokenFingerprint, into: &out)
        object.end(into: &out)
    }
}
