import Foundation
import IsletMessages
import IsletTokens

/// WidgetKit pushes (iOS 26): an activity's event that changes its state (or ends it) refreshes the
/// home-screen widgets its template names (``ActivityTemplate/widgets``) on every device of the
/// activity's user. The push carries no content (`{"aps":{"content-changed":true}}`): the widget
/// reloads its timeline and fetches its data from the app's own server. One push per device (a
/// device's widget token is the same for all its kinds), keyed by the device's widget key of the
/// template's first kind it has, so that the dispatcher queues, coalesces and budgets it per
/// device, apart from the activity. Its outcome concerns the widget token only: the activity's
/// memory never follows it.
extension ContentEngine {
    /// One device's widgets an event may refresh.
    struct WidgetTarget: Equatable, Sendable {
        /// `wgt:<bundleId>:<deviceId>:<kind>`.
        var key: String
        var kind: String
        var deviceId: String
        var registeredAt: Date
    }

    /// The most devices one event refreshes widgets on.
    static let maximumWidgetDevices = 16

    /// The devices whose widgets of the template's kinds an event of the activity may refresh:
    /// those of the user whose token the content is made for (`record`: the activity's, or the
    /// push-to-start target's), with an active widget token, one per device and token.
    func widgetTargets(template: ActivityTemplate, app: AppTarget, record: DeliveryToken?) -> [WidgetTarget] {
        guard let widgets = template.widgets, let owner = record?.owner else { return [] }
        var targets: [WidgetTarget] = []
        var devices: Set<String> = []
        var fingerprints: Set<String> = []
        for kind in widgets.kinds {
            for key in tokens.widgetKeys(bundleId: app.bundleId, kind: kind, owner: owner) {
                guard targets.count < Self.maximumWidgetDevices, let token = tokens.token(forKey: key), token.state == .active,
                    token.owner == owner, let deviceId = token.deviceId, !devices.contains(deviceId),
                    fingerprints.insert(token.fingerprint).inserted
                else { continue }
                devices.insert(deviceId)
                targets.append(WidgetTarget(key: key, kind: kind, deviceId: deviceId, registeredAt: token.registeredAt))
            }
        }
        return targets.sorted { $0.key < $1.key }
    }

    /// `requests` preceded by a widget push to each of `inputs.widgets` when the activity's content
    /// among them enters a state the template refreshes widgets on, or ends it. Its id is derived
    /// from the content's request's and the device: the same event read again makes the same push.
    /// Handed to Kafka before the content. The two go to different partitions, which Kafka stores
    /// independently: a writer that stops (or loses the partition) after the content was stored
    /// and before a push was leaves the event a duplicate for the next owner, and that refresh is
    /// lost (the widget reloads on its own timeline); the next listed state refreshes it again.
    func withWidgetPushes(_ requests: [PushRequest], template: ActivityTemplate, _ inputs: AssemblyInputs, now: Date) -> [PushRequest] {
        guard let widgets = template.widgets, !inputs.widgets.isEmpty,
            let content = requests.last(where: { !$0.isDeviceCopy && !$0.isStartCopy && !$0.isWidget }),
            widgets.refreshes(state: content.state, previous: inputs.memory.lastState, isEnd: content.event == .end)
        else { return requests }
        let pushes = inputs.widgets.map { target in
            PushRequest(
                requestId: RequestIds.widget(of: content.requestId, deviceId: target.deviceId), event: .update, app: inputs.app,
                attributesType: target.kind, payload: PushRequest.widgetPayload, priority: 5, urgency: .routine, supersedable: true,
                alerting: false, apnsTimestamp: Int64(now.timeIntervalSince1970), contentSequence: content.contentSequence,
                expiration: now.addingTimeInterval(Self.widgetPushLifetime), createdAt: now, sourceEventId: content.sourceEventId,
                sourceActivityId: content.sourceActivityId ?? content.activityId, state: content.state, tokenRegisteredAt: target.registeredAt,
                widgetKey: target.key)
        }
        return pushes + requests
    }

    /// How long APNs keeps a widget push for a phone that is offline (`apns-expiration`): a reload
    /// later than that is no news (the widget's own timeline has moved on).
    static let widgetPushLifetime: TimeInterval = 3_600
}
