import Crypto
import Foundation

/// Request ids (sent as `apns-id`) derived from what the request is, not drawn at random: the same
/// event handled twice (a crash before its offset was stored, a retried gRPC call) produces the
/// same ids, so the dispatcher and the phone see one request, and a gRPC call can answer with the
/// ids before the requests exist. Name-based UUIDs, version 5 (RFC 9562: SHA-1 over a namespace
/// and a name).
public enum RequestIds {
    /// Islet's namespace for request ids.
    static let namespace: [UInt8] = Array(UUID(uuidString: "5b1f7c7e-2d4a-4f0e-9a51-3c6e0b8d2f10")!.bytes)

    /// The request for an event's own content. The app is part of the name: two apps may use the
    /// same activity id, and their backends the same event ids.
    public static func content(bundleId: String, activityId: String, eventId: String) -> String {
        make("event:\(bundleId)/\(activityId):\(eventId)")
    }

    /// The alerting update sent just before an end whose final state alerts.
    public static func alertBeforeEnd(bundleId: String, activityId: String, eventId: String) -> String {
        make("event:\(bundleId)/\(activityId):\(eventId):alert")
    }

    /// The freshness monitor's n-th re-send of a request's content.
    public static func resend(of requestId: String, number: Int) -> String {
        make("resend:\(requestId):\(number)")
    }

    /// The push-to-start that starts an activity sent by broadcast on one device, on its channel
    /// (``PushRequest/channelId``): one id per activity, device and push-to-start token (its
    /// fingerprint), whatever the event: a backend's retry under a new event id, or the event read
    /// again, is the same request (the dispatcher takes an id once, while it remembers it); a new
    /// token (rotated) makes a new one. The app registering the same token again changes nothing.
    public static func channelStart(bundleId: String, activityId: String, deviceId: String, tokenFingerprint: String) -> String {
        make("channel-start:\(bundleId)/\(activityId):\(deviceId):\(tokenFingerprint)")
    }

    /// The copy of a request for one more device of its activity (``PushRequest/deviceId``).
    public static func copy(of requestId: String, deviceId: String) -> String {
        make("device:\(requestId):\(deviceId)")
    }

    /// The widget push (``PushRequest/widgetKey``) an activity's content makes on one device of its user.
    public static func widget(of requestId: String, deviceId: String) -> String {
        make("widget:\(requestId):\(deviceId)")
    }

    /// The latest content sent again to a device of its activity that registered after it was made
    /// (``ContentEngine/catchUpDevices(in:owned:now:prepared:)``).
    public static func catchUp(of requestId: String, deviceId: String) -> String {
        make("catch-up:\(requestId):\(deviceId)")
    }

    /// The end the service sends by itself (lifetime or severe staleness) after a request's content.
    public static func end(after requestId: String) -> String {
        make("end:\(requestId)")
    }

    /// The event id of an HTTP call that carried an `Idempotency-Key` and no event id: the same
    /// for every repeat of the call (same backend, path and body: `fingerprint`), whichever
    /// instance it reaches; another for the key reused with another body. The backend is part of
    /// the name: two backends may use the same keys.
    public static func event(backend: String, activityId: String, idempotencyKey: String, fingerprint: String) -> String {
        make("idempotency:\(backend):\(activityId):\(idempotencyKey):\(fingerprint)")
    }

    static func make(_ name: String) -> String {
        var hash = Insecure.SHA1()
        hash.update(data: namespace)
        hash.update(data: Array(name.utf8))
        var bytes = Array(hash.finalize().prefix(16))
        bytes[6] = (bytes[6] & 0x0F) | 0x50  // version 5
        bytes[8] = (bytes[8] & 0x3F) | 0x80  // RFC variant
        let uuid = UUID(uuid: (
            bytes[0], bytes[1], bytes[2], bytes[3], bytes[4], bytes[5], bytes[6], bytes[7],
            bytes[8], bytes[9], bytes[10], bytes[11], bytes[12], bytes[13], bytes[14], bytes[15]))
        return uuid.uuidString.lowercased()
    }
}

extension UUID {
    fileprivate var bytes: [UInt8] {
        withUnsafeBytes(of: uuid) { Array($0) }
    }
}
