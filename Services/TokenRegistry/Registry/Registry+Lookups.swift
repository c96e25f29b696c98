import Foundation
import HTTPTypes
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import Synchronization

// Reads: the app's view of its tokens, and the key an activity id stands for.
extension Registry {
    /// The app's view of one of its activities.
    /// - Parameter bundleId: the activity's app; `nil`: the caller's only activity of that id.
    public func activity(user: String, activityId: String, bundleId: String? = nil) throws(APIError) -> TokenStateView {
        try requireReady()
        let key = try activityKey(activityId, bundleId: bundleId, user: user)
        var view = try view(user: user, key: key)
        let devices = deviceViews(of: key, user: user)
        if !devices.isEmpty { view.devices = devices }
        return view
    }

    /// The app's view of one of its push-to-start tokens.
    public func pushToStart(user: String, bundleId: String, deviceId: String, attributesType: String) throws(APIError) -> TokenStateView {
        try view(user: user, key: try Self.pushToStartKey(bundleId: bundleId, deviceId: deviceId, attributesType: attributesType))
    }

    /// The state of a device's widget token for widgets of `kind` (the caller's own).
    public func widget(user: String, bundleId: String, deviceId: String, kind: String) throws(APIError) -> TokenStateView {
        try view(user: user, key: try Self.widgetKey(bundleId: bundleId, deviceId: deviceId, kind: kind))
    }

    /// A user's own token by key, or 404 (another user's token is not revealed to exist).
    func view(user: String, key: String) throws(APIError) -> TokenStateView {
        try requireReady()
        guard let record = table.record(forKey: key), record.userId == user else { throw APIError.notFound }
        return TokenStateView(record)
    }

    /// The key of an activity: of `bundleId`'s app when given; otherwise of the only app in which
    /// the id is registered — `user`'s activities only when a user asks (another user's are not
    /// revealed to exist: 404), every app's for a backend. An id in several apps needs the app
    /// named: 409 `conflict` on field `bundleId`.
    public func activityKey(_ activityId: String, bundleId: String?, user: String?) throws(APIError) -> String {
        let activityId = try Validation.identifier(activityId, field: "activityId")
        if let bundleId {
            return MessageKey.activity(bundleId: try Validation.bundleId(bundleId, field: "bundleId"), activityId: activityId)
        }
        let table = self.table
        let keys = table.keys(forActivity: activityId).filter { key in user == nil || table.record(forKey: key)?.userId == user }
        switch keys.count {
        case 0: throw APIError.notFound
        case 1: return keys[0]
        default:
            let apps = keys.compactMap { table.record(forKey: $0)?.app.bundleId }
            throw APIError(
                .conflict, .conflict, field: "bundleId",
                reason: "the activity id is registered in several apps (\(apps.joined(separator: ", "))): name the app with bundleId")
        }
    }

    static func widgetKey(bundleId: String, deviceId: String, kind: String) throws(APIError) -> String {
        MessageKey.widget(
            bundleId: try Validation.bundleId(bundleId, field: "bundleId"), deviceId: try Validation.identifier(deviceId, field: "deviceId"),
            kind: try Validation.widgetKind(kind))
    }

    static func pushToStartKey(bundleId: String, deviceId: String, attributesType: String) throws(APIError) -> String {
        MessageKey.pushToStart(
            bundleId: try Validation.bundleId(bundleId, field: "bundleId"), deviceId: try Validation.identifier(deviceId, field: "deviceId"),
            attributesType: try Validation.attributesType(attributesType))
    }
}
