import Foundation
import IsletMessages

/// The Swift values the golden files in `Golden/` must decode to and encode from.
///
/// One story: order 42 of a food-delivery app is started by push-to-start, goes out for delivery
/// and is tapped on the lock screen; an older ride's token is rejected by APNs.
enum Examples {
    static let foodApp = AppTarget(bundleId: "com.example.fooddelivery", environment: .production)
    static let rideApp = AppTarget(bundleId: "com.example.rides", environment: .production)
    static let scoresApp = AppTarget(bundleId: "com.example.scores", environment: .production)
    static let deviceId = "5D3F8A2E-9C41-4B7A-8E06-1F2A3B4C5D6E"
    static let orderUpdateToken =
        "31c91051326739516b6a5274fc7a81252b538dde8272428ff7b8e9845d54428302594e61abcebda71f06f909dca46f7d3c3698169782b4ae74170d6cbd9fb568b1d6a28bea19614afc66d23e41a01604"
    static let pushToStartToken =
        "14a9c5f1bca5da26b8b9a6bc7cc3eaf07ee4e37a59e9885b5307e30bfc65d469ae85b57a901c8eb76341bef187aa718503f92d8222fd219ab4da6aa182feb7ec13721c54192f5910d17595ea2b88dc99"
    static let rideToken =
        "24acb7dd570d4d1318da04af69521104d774ad848968d95fbb3a692913349c25191007be5763e5b007ac5d9ebbeaf5a5540ee6a4d408a1571a4c6953625f2beeda78b7824706fcedf9469ab16ac47be4"
    static let pushToStartKey = "pts:com.example.fooddelivery:5D3F8A2E-9C41-4B7A-8E06-1F2A3B4C5D6E:DeliveryAttributes"

    // MARK: TokenRecord

    static let tokenRecord = TokenRecord(
        kind: .update, activityId: "order-42", deviceId: deviceId, userId: "user-1842", token: orderUpdateToken, app: foodApp,
        attributesType: "DeliveryAttributes", frequentUpdatesEnabled: true, appVersion: "5.12.0", state: .active,
        activityStartedAt: utc(2026, 11, 22, 10, 2, 11, 482), registeredAt: utc(2026, 11, 22, 10, 2, 12, 917),
        updatedAt: utc(2026, 11, 22, 10, 2, 12, 917), ownerVerified: true, locale: "zh-Hans-CN")

    static let tokenRecordPushToStart = TokenRecord(
        kind: .pushToStart, deviceId: deviceId, userId: "user-1842", token: pushToStartToken, app: foodApp,
        attributesType: "DeliveryAttributes", frequentUpdatesEnabled: true, appVersion: "5.12.0", state: .active,
        registeredAt: utc(2026, 11, 20, 18, 40, 3, 51), updatedAt: utc(2026, 11, 22, 9, 58, 44, 310))

    /// The device's WidgetKit push token (iOS 26) for the app's order widget: its kind in
    /// `attributesType`, under the widget key `wgt:<bundleId>:<deviceId>:<kind>`.
    static let tokenRecordWidget = TokenRecord(
        kind: .widget, deviceId: deviceId, userId: "user-1842", token: widgetToken, app: foodApp, attributesType: "OrderStatusWidget",
        frequentUpdatesEnabled: false, appVersion: "5.12.0", state: .active, registeredAt: utc(2026, 11, 20, 18, 40, 4, 12),
        updatedAt: utc(2026, 11, 20, 18, 40, 4, 12))

    static let widgetToken = "5c0a9e81d2f34b67a8c1e9d0f2b3a4c5d6e7f8091a2b3c4d5e6f708192a3b4c5"
    static let widgetKey = MessageKey.widget(bundleId: foodApp.bundleId, deviceId: deviceId, kind: "OrderStatusWidget")

    /// The device's push-to-start token, retired after a start on it was not confirmed in time
    /// (order 42's update token never came: it may be stale).
    static let tokenRecordStartUnconfirmed = TokenRecord(
        kind: .pushToStart, deviceId: deviceId, userId: "user-1842", token: pushToStartToken, app: foodApp,
        attributesType: "DeliveryAttributes", frequentUpdatesEnabled: true, appVersion: "5.12.0", state: .invalidated,
        invalidation: .init(reason: .startUnconfirmed, invalidatedAt: utc(2026, 11, 22, 10, 3, 10, 412), startActivityId: "order-42"),
        registeredAt: utc(2026, 11, 20, 18, 40, 3, 51), updatedAt: utc(2026, 11, 22, 10, 3, 10, 412))

    static let tokenRecordInvalidated = TokenRecord(
        kind: .update, activityId: "ride-7f3a9c", deviceId: "0B9E7C1D-2A4F-4E65-B8D3-7C6A5F4E3D2C", userId: "rider-55210",
        token: rideToken, app: rideApp, attributesType: "RideAttributes", frequentUpdatesEnabled: false, appVersion: "3.4.1",
        state: .invalidated,
        invalidation: .init(
            reason: .apnsUnregistered, invalidatedAt: utc(2026, 11, 22, 9, 12, 45, 20), apnsTimestamp: utc(2026, 11, 22, 8, 41, 17)),
        activityStartedAt: utc(2026, 11, 22, 8, 30, 1, 512), registeredAt: utc(2026, 11, 22, 8, 30, 2, 144),
        updatedAt: utc(2026, 11, 22, 9, 12, 45, 20))

    /// The same order followed on a second device of its user (an iPad): that device's own token,
    /// under `<bundleId>/<activityId>/<deviceId>`.
    static let tokenRecordDevice = TokenRecord(
        kind: .update, activityId: "order-42", deviceId: "C2D4E6F8-1A3B-4C5D-8E7F-90A1B2C3D4E5", userId: "user-1842", token: rideToken,
        app: foodApp, attributesType: "DeliveryAttributes", frequentUpdatesEnabled: true, appVersion: "5.12.0", state: .active,
        activityStartedAt: utc(2026, 11, 22, 10, 4, 2, 10), registeredAt: utc(2026, 11, 22, 10, 4, 2, 731), updatedAt: utc(2026, 11, 22, 10, 4, 2, 731),
        locale: "en-GB", deviceKeyed: true)

    /// An order its backend ended on every device, after the user had dismissed it on the first.
    static let tokenRecordEndedEverywhere = TokenRecord(
        kind: .update, activityId: "order-42", deviceId: "5D3F8A2E-9C41-4B7A-8E06-1F2A3B4C5D6E", userId: "user-1842", token: orderUpdateToken,
        app: foodApp, attributesType: "DeliveryAttributes", frequentUpdatesEnabled: true, appVersion: "5.12.0", state: .invalidated,
        invalidation: .init(reason: .userDismissed, invalidatedAt: utc(2026, 11, 22, 10, 20, 5, 118), everyDevice: true),
        registeredAt: utc(2026, 11, 22, 10, 2, 11, 307), updatedAt: utc(2026, 11, 22, 10, 41, 0, 52))

    static let tokenRecordMinimal = TokenRecord(
        kind: .update, activityId: "order-42", userId: "user-1842", token: orderUpdateToken, app: foodApp,
        attributesType: "DeliveryAttributes", frequentUpdatesEnabled: false, appVersion: "5.12.0", state: .active,
        registeredAt: utc(2026, 11, 22, 10, 2, 12, 917), updatedAt: utc(2026, 11, 22, 10, 2, 12, 917))

    // MARK: ActivityEvent

    static let activityEvent = ActivityEvent(
        eventId: "orders-outbox-88314", activityId: "order-42", kind: .update, attributesType: "DeliveryAttributes",
        fields: ["status": .string("out_for_delivery"), "etaMinutes": .integer(12), "courierName": .string("Ana"), "distanceKm": .number(3.4)],
        urgency: .important, occurredAt: utc(2026, 11, 22, 10, 15, 30, 123), sequence: 5, source: "orders-service",
        bundleId: foodApp.bundleId)

    static let activityEventPushToStart = ActivityEvent(
        eventId: "orders-outbox-88207", activityId: "order-42", kind: .start, attributesType: "DeliveryAttributes",
        fields: ["status": .string("preparing"), "etaMinutes": .integer(35)], urgency: .important,
        occurredAt: utc(2026, 11, 22, 10, 2, 9, 870), sequence: 1,
        startTarget: .init(app: foodApp, deviceId: deviceId),
        attributes: ["orderId": .string("42"), "restaurantName": .string("Casa Lola")], source: "orders-service",
        bundleId: foodApp.bundleId)

    /// Started on every device of a user that registered a push-to-start token for the type.
    static let activityEventUserStart: ActivityEvent = {
        var event = activityEventPushToStart
        event.eventId = "orders-outbox-88208"
        event.startTarget = .init(app: foodApp, userId: "user-8812")
        return event
    }()

    static let activityEventMinimal = ActivityEvent(
        eventId: "orders-outbox-88342", activityId: "order-42", kind: .end, attributesType: "DeliveryAttributes",
        fields: ["status": .string("delivered")], urgency: .routine, occurredAt: utc(2026, 11, 22, 10, 31, 2, 500), sequence: 7)

    static let activityEventPresented = ActivityEvent(
        eventId: "orders-outbox-88350", activityId: "order-43", kind: .end, attributesType: "DeliveryAttributes",
        fields: ["status": .string("delivered")], urgency: .important, occurredAt: utc(2026, 11, 22, 10, 31, 2, 500), sequence: 8,
        source: "orders-service", bundleId: foodApp.bundleId,
        presentation: EventPresentation(
            dismissal: .immediate, relevanceScore: 20, staleAfterSeconds: 60, sound: "default", alert: .init(title: "Delivered", body: "Enjoy your meal")))

    /// The driver is here: an alert the phone localizes (the app's `Localizable.strings`), with
    /// the backend's own Chinese for a phone in Chinese.
    static let activityEventLocalizedAlert = ActivityEvent(
        eventId: "rides-outbox-5120", activityId: "ride-9", kind: .update, attributesType: "RideAttributes",
        fields: ["phase": .string("arriving")], urgency: .important, occurredAt: utc(2026, 11, 22, 10, 40, 11, 250), sequence: 6,
        source: "rides-service", bundleId: rideApp.bundleId,
        presentation: EventPresentation(
            alert: .init(
                titleLocKey: "RIDE_DRIVER_HERE_TITLE", titleLocArgs: ["Tim"], bodyLocKey: "RIDE_DRIVER_HERE_BODY", bodyLocArgs: ["Blue Prius", "KX 42 LT"],
                translations: ["zh-Hans": .init(title: "Tim 已到达", body: "请找蓝色 Prius KX 42 LT")])))

    static let activityEventScheduled = ActivityEvent(
        eventId: "orders-outbox-88315", activityId: "order-42", kind: .update, attributesType: "DeliveryAttributes",
        fields: ["courierName": .string("Ana"), "status": .string("arriving")], urgency: .important, occurredAt: utc(2026, 11, 22, 10, 15, 30, 123),
        sequence: 1_795_343_250_000, source: "orders-service", bundleId: foodApp.bundleId, at: utc(2026, 11, 22, 10, 27, 30))

    // MARK: PushRequest

    static let pushRequest = PushRequest(
        requestId: "761FBAD2-5120-49C1-A1CB-D688796ADE2B", activityId: "order-42", event: .update, app: foodApp,
        attributesType: "DeliveryAttributes",
        payload: #"{"aps":{"timestamp":1795342530,"event":"update","content-state":{"status":"out_for_delivery","etaMinutes":12,"courierName":"Ana","distanceKm":3.4},"stale-date":1795344330,"relevance-score":80,"alert":{"title":"Order 42 is on its way","body":"Ana will be there in about 12 minutes.","sound":"default"}}}"#,
        priority: 10, urgency: .important, supersedable: true, alerting: true, apnsTimestamp: 1_795_342_530, contentSequence: 5,
        staleDate: utc(2026, 11, 22, 10, 45, 30), expiration: utc(2026, 11, 22, 10, 25, 30),
        createdAt: utc(2026, 11, 22, 10, 15, 30, 214), sourceEventId: "orders-outbox-88314", sourceActivityId: "order-42",
        state: "out_for_delivery", tokenRegisteredAt: utc(2026, 11, 22, 10, 2, 11, 307))

    /// The same update's copy for the order's second device (its iPad).
    static let pushRequestDeviceCopy: PushRequest = {
        var copy = pushRequest
        copy.requestId = "3E9B1C57-0D2A-5F64-8B17-C4A92E6D0F83"
        copy.deviceId = "C2D4E6F8-1A3B-4C5D-8E7F-90A1B2C3D4E5"
        copy.tokenRegisteredAt = utc(2026, 11, 22, 10, 4, 2, 731)
        return copy
    }()

    /// A goal, broadcast to every phone following the match: one request for the match's channel.
    static let pushRequestBroadcast = PushRequest(
        requestId: "0C8E2F4A-6B1D-4E73-9A25-D3F70B6C9E18", activityId: "match-7", event: .update, app: scoresApp,
        attributesType: "ScoreAttributes",
        payload: #"{"aps":{"timestamp":1795343400,"event":"update","content-state":{"home":2,"away":1,"minute":67,"lastEvent":"Goal: Rivera 67'"},"stale-date":1795345200}}"#,
        priority: 10, urgency: .important, supersedable: true, alerting: false, apnsTimestamp: 1_795_343_400, contentSequence: 14,
        staleDate: utc(2026, 11, 22, 11, 0, 0), createdAt: utc(2026, 11, 22, 10, 30, 0, 318), sourceEventId: "scores-feed-20417",
        sourceActivityId: "match-7", state: "live", channelStoragePolicy: 0)

    /// A fan's phone joins match 7 at minute 67: a push-to-start that subscribes the new activity
    /// to the match's broadcast channel (iOS 18), stamped with the channel's latest timestamp.
    static let pushRequestChannelStart = PushRequest(
        requestId: "3A7C1E90-5B2D-4F64-8E13-A9D0C2B7F451", pushToStartKey: MessageKey.pushToStart(bundleId: scoresApp.bundleId, deviceId: deviceId, attributesType: "ScoreAttributes"),
        event: .start, app: scoresApp, attributesType: "ScoreAttributes",
        payload: #"{"aps":{"timestamp":1795343400,"event":"start","content-state":{"home":2,"away":1,"minute":67,"lastEvent":"Goal: Rivera 67'"},"attributes-type":"ScoreAttributes","attributes":{"matchId":"match-7"},"alert":{"title":"Lions 2 – 1 Bears"},"input-push-channel":"dHN0LXNyY2gtY2hubA==","stale-date":1795345200}}"#,
        priority: 10, urgency: .important, supersedable: false, alerting: true, apnsTimestamp: 1_795_343_400, contentSequence: 1,
        staleDate: utc(2026, 11, 22, 11, 0, 0), expiration: utc(2026, 11, 22, 11, 31, 2), createdAt: utc(2026, 11, 22, 10, 31, 2, 77),
        sourceEventId: "fan-joins-5532", sourceActivityId: "match-7", state: "live", tokenRegisteredAt: utc(2026, 11, 20, 18, 40, 4, 12),
        channelId: "dHN0LXNyY2gtY2hubA==")

    static let pushRequestPushToStart = PushRequest(
        requestId: "EBB93B8D-EF2E-4821-9238-20A483574786", pushToStartKey: pushToStartKey, event: .start, app: foodApp,
        attributesType: "DeliveryAttributes",
        payload: #"{"aps":{"timestamp":1795341729,"event":"start","content-state":{"status":"preparing","etaMinutes":35},"attributes-type":"DeliveryAttributes","attributes":{"orderId":"42","restaurantName":"Casa Lola"},"alert":{"title":"Order 42 confirmed","body":"Casa Lola is preparing your order."},"input-push-token":1,"stale-date":1795343529}}"#,
        priority: 10, urgency: .important, supersedable: false, alerting: true, apnsTimestamp: 1_795_341_729, contentSequence: 1,
        staleDate: utc(2026, 11, 22, 10, 32, 9), expiration: utc(2026, 11, 22, 10, 32, 9),
        createdAt: utc(2026, 11, 22, 10, 2, 9, 955), sourceEventId: "orders-outbox-88207", sourceActivityId: "order-42",
        state: "preparing")

    /// Order 42 is on its way: the user's order widget on the device is told to reload (iOS 26).
    static let pushRequestWidget = PushRequest(
        requestId: "0F6B3E2A-91C4-5D7E-8A2B-4C6D8E0F1A3B", event: .update, app: foodApp, attributesType: "OrderStatusWidget",
        payload: PushRequest.widgetPayload, priority: 5, urgency: .routine, supersedable: true, alerting: false, apnsTimestamp: 1_795_342_940,
        contentSequence: 3, expiration: utc(2026, 11, 22, 11, 22, 20), createdAt: utc(2026, 11, 22, 10, 22, 20, 518),
        sourceEventId: "orders-outbox-88251", sourceActivityId: "order-42", state: "out_for_delivery",
        tokenRegisteredAt: utc(2026, 11, 20, 18, 40, 4, 12), widgetKey: widgetKey)

    /// A start to every device of Ana: the one for her iPad (a second device), written before the
    /// one for her first device (`EBB93B8D…`, which names the group too).
    static let pushRequestUserStart: PushRequest = {
        var copy = pushRequestPushToStart
        copy.requestId = "5D0C2B7A-8E41-4F3B-9A6D-2C7E1F0B9D34"
        copy.pushToStartKey = MessageKey.pushToStart(bundleId: foodApp.bundleId, deviceId: "D9E1C2B0-7A34-4C8E-B1F5-6E2D3A9C8B17", attributesType: "DeliveryAttributes")
        copy.startGroup = pushRequestPushToStart.requestId
        return copy
    }()

    // MARK: PushOutcome

    // MARK: ContentMemoryRecord

    /// Order 42's memory after its update was delivered: what is kept of the latest request (the
    /// request itself is on islet.push-requests.v1, partition 2, offset 18342), and the outcome of
    /// a re-send whose request was not read yet.
    static let contentMemoryRecord: ContentMemoryRecord = {
        let latest = ContentMemoryRecord.Latest(
            requestId: pushRequest.requestId, event: pushRequest.event, app: pushRequest.app, attributesType: pushRequest.attributesType,
            createdAt: pushRequest.createdAt, staleDate: pushRequest.staleDate, contentSequence: pushRequest.contentSequence, content: true)
        return ContentMemoryRecord(
            activity: .init(
                bundleId: foodApp.bundleId, activityId: "order-42", partition: 2, lastSequence: 5, lastTimestamp: 1_795_342_530,
                lastState: "out_for_delivery", alertTimes: [utc(2026, 11, 22, 10, 2, 11, 690), utc(2026, 11, 22, 10, 15, 30, 214)],
                startedAt: utc(2026, 11, 22, 10, 2, 11, 690), latest: latest, payloadStoredAt: .init(partition: 2, offset: 18_342),
                outcomes: [
                    .init(requestId: "761FBAD2-5120-49C1-A1CB-D688796ADE2B", result: .delivered),
                    .init(requestId: "2f1c9a4e-7b3d-5e08-9c6a-41d2b7e8f305", result: .coalesced, completedAt: utc(2026, 11, 22, 10, 16, 1, 87)),
                ],
                contentRequestId: "761FBAD2-5120-49C1-A1CB-D688796ADE2B", inlinedImages: ["https://cdn.example.com/couriers/ana.png"],
                pendingImages: [
                    .init(requestId: "0C1B2A39-4857-4E6F-8A9B-C0D1E2F3A4B5", urls: ["https://cdn.example.com/maps/42.png"],
                        since: utc(2026, 11, 22, 10, 16, 2, 5))
                ],
                outcomePositions: [.init(partition: 2, offset: 18_351), .init(partition: 2, offset: 18_290)]),
            writtenAt: utc(2026, 11, 22, 10, 16, 3, 120))
    }()

    /// A ride whose content was re-sent once, then whose token APNs declared dead; its latest
    /// payload was not found where it had been stored.
    static let contentMemoryRecordGone = ContentMemoryRecord(
        activity: .init(
            bundleId: rideApp.bundleId, activityId: "ride-7f3a9c", partition: 0, lastSequence: 9, lastTimestamp: 1_795_338_104,
            lastState: "arriving", startedAt: utc(2026, 11, 22, 8, 30, 1, 512),
            latest: .init(
                requestId: "5A0FA772-2594-4FEB-A31A-BD2B593AEA89", event: .update, app: rideApp, attributesType: "RideAttributes",
                createdAt: utc(2026, 11, 22, 9, 2, 14, 300), contentSequence: 9, content: false),
            payloadStoredAt: .init(partition: 0, offset: 5_120),
            payloadLost: true, outcomes: [.init(requestId: "5A0FA772-2594-4FEB-A31A-BD2B593AEA89", result: .tokenInvalid)],
            contentRequestId: "B3E0C7A1-64D2-4F19-9C5E-0A7D2E8F1B43", resends: 1, lastResendAt: utc(2026, 11, 22, 9, 2, 14, 300), gone: true,
            goneAt: utc(2026, 11, 22, 9, 12, 44, 871), goneToken: "ed53cfd0932de6c9"),
        writtenAt: utc(2026, 11, 22, 9, 12, 45, 910))

    /// Order 42 started by push-to-start, no token on the device yet (the dispatcher waits for one).
    static let contentMemoryRecordPushToStart = ContentMemoryRecord(
        activity: .init(
            bundleId: foodApp.bundleId, activityId: "order-42", partition: 2, lastSequence: 1, lastTimestamp: 1_795_341_729,
            lastState: "preparing", alertTimes: [utc(2026, 11, 22, 10, 2, 9, 955)], startedAt: utc(2026, 11, 22, 10, 2, 9, 955),
            latest: .init(
                requestId: pushRequestPushToStart.requestId, event: .start, app: foodApp, attributesType: "DeliveryAttributes",
                createdAt: pushRequestPushToStart.createdAt, staleDate: pushRequestPushToStart.staleDate, contentSequence: 1, content: true,
                pushToStartKey: pushToStartKey),
            payloadStoredAt: .init(partition: 5, offset: 902),
            outcomes: [.init(requestId: pushRequestPushToStart.requestId, result: .awaitingToken)], contentRequestId: pushRequestPushToStart.requestId,
            startedWith: pushToStartKey),
        writtenAt: utc(2026, 11, 22, 10, 2, 15, 2))

    /// Started on every device of a user: the first device's start, marked so (no second start
    /// while another device may have it).
    static let contentMemoryRecordUserStart: ContentMemoryRecord = {
        var record = contentMemoryRecordPushToStart
        record.activity?.latest?.userStart = true
        return record
    }()

    /// Order 42's push-to-start, accepted by APNs; no update token came within the confirmation
    /// time: `startUnconfirmed` was written (the start's watchdog).
    static let contentMemoryRecordStartWatch: ContentMemoryRecord = {
        var record = contentMemoryRecordPushToStart
        record.activity?.outcomes = [.init(requestId: pushRequestPushToStart.requestId, result: .startUnconfirmed)]
        record.activity?.startWatch = .init(
            requestId: pushRequestPushToStart.requestId, pushToStartKey: pushToStartKey, tokenFingerprint: "1dc680413d2f03b8",
            deliveredAt: utc(2026, 11, 22, 10, 2, 10, 99), reportedAt: utc(2026, 11, 22, 10, 3, 12, 5))
        return record
    }()

    /// Partition 2's checkpoint: its memories reflect every request and outcome before these offsets.
    static let contentMemorySteps = ContentMemoryRecord(
        activity: .init(
            bundleId: foodApp.bundleId, activityId: "order-42", partition: 2, lastSequence: 1_795_342_530_000, lastTimestamp: 1_795_342_530,
            lastState: "out_for_delivery", startedAt: utc(2026, 11, 22, 10, 2, 11, 500), steps: [activityEventScheduled]),
        writtenAt: utc(2026, 11, 22, 10, 15, 30, 310))

    static let contentMemoryCheckpoint = ContentMemoryRecord(
        checkpoint: .init(
            partition: 2,
            positions: [
                .init(topic: "islet.push-requests.v1", partition: 2, offset: 18_343),
                .init(topic: "islet.push-outcomes.v1", partition: 2, offset: 17_906),
            ]),
        writtenAt: utc(2026, 11, 22, 10, 16, 3, 124))

    // MARK: DispatchBudgetRecord

    /// Order 42's priority-10 budget after a burst of updates: a quarter of a send left of 12, and a
    /// critical update waiting for the next one.
    static let dispatchBudgetRecord = DispatchBudgetRecord(
        bundleId: foodApp.bundleId, activityId: "order-42", partition: 2, available: 0.25, capacity: 12, periodSeconds: 3_600,
        updatedAt: utc(2026, 11, 22, 10, 16, 1, 87), waitingSince: utc(2026, 11, 22, 10, 16, 1, 87), writtenAt: utc(2026, 11, 22, 10, 16, 3, 120))

    /// The order's budget on its second device (APNs counts per activity on each device).
    static let dispatchBudgetRecordDevice = DispatchBudgetRecord(
        bundleId: foodApp.bundleId, activityId: "order-42", partition: 2, available: 9.5, capacity: 12, periodSeconds: 3_600,
        updatedAt: utc(2026, 11, 22, 10, 16, 1, 90), writtenAt: utc(2026, 11, 22, 10, 16, 3, 120), activityDeviceId: "C2D4E6F8-1A3B-4C5D-8E7F-90A1B2C3D4E5")

    /// A device's push-to-start budget, written to the partition of the push-to-start request that spent it.
    static let dispatchBudgetRecordPushToStart = DispatchBudgetRecord(
        bundleId: foodApp.bundleId, deviceId: "5C3F2A10-8B7E-4D21-9F6A-3E1C0B9D7A54", partition: 5, available: 6.5, capacity: 8,
        periodSeconds: 480, updatedAt: utc(2026, 11, 22, 10, 2, 11, 690), writtenAt: utc(2026, 11, 22, 10, 2, 15, 2))

    // MARK: BroadcastChannelRecord

    /// Match 7's channel, made on its first broadcast, its end delivered: deleted in six hours.
    static let broadcastChannelRecord = BroadcastChannelRecord(
        app: scoresApp, activityId: "match-7", channelId: "dHN0LXNyY2gtY2hubA==", storagePolicy: 0, createdAt: utc(2026, 11, 22, 9, 0, 1, 402),
        endedAt: utc(2026, 11, 22, 10, 52, 13, 77), deleteAt: utc(2026, 11, 22, 16, 52, 13, 77), writtenAt: utc(2026, 11, 22, 10, 52, 13, 90))

    /// The same channel once deleted: nothing can be sent on it any more.
    static let broadcastChannelRecordDeleted = BroadcastChannelRecord(
        app: scoresApp, activityId: "match-7", channelId: "dHN0LXNyY2gtY2hubA==", storagePolicy: 0, createdAt: utc(2026, 11, 22, 9, 0, 1, 402),
        endedAt: utc(2026, 11, 22, 10, 52, 13, 77), deleteAt: utc(2026, 11, 22, 16, 52, 13, 77), deletedAt: utc(2026, 11, 22, 16, 52, 13, 512),
        writtenAt: utc(2026, 11, 22, 16, 52, 13, 530))

    /// The broadcast's outcome: one for the channel, whatever the subscribers.
    static let pushOutcomeBroadcast = PushOutcome(
        requestId: "0C8E2F4A-6B1D-4E73-9A25-D3F70B6C9E18", activityId: "match-7", result: .delivered,
        apns: .init(status: 200, apnsId: "0C8E2F4A-6B1D-4E73-9A25-D3F70B6C9E18", uniqueId: "5b1a3c70-9d2e-4f18-8a64-c07e19d3b2f5"), priorityUsed: 10,
        attempts: 1, latencyMilliseconds: 41.3,
        completedAt: utc(2026, 11, 22, 10, 30, 0, 361), bundleId: scoresApp.bundleId, attributesType: "ScoreAttributes",
        channelId: "dHN0LXNyY2gtY2hubA==")

    /// That start, delivered: the outcome names the channel the phone's activity joined.
    static let pushOutcomeChannelStart = PushOutcome(
        requestId: "3A7C1E90-5B2D-4F64-8E13-A9D0C2B7F451", pushToStartKey: pushRequestChannelStart.pushToStartKey, result: .delivered,
        apns: .init(status: 200, apnsId: "3A7C1E90-5B2D-4F64-8E13-A9D0C2B7F451"), priorityUsed: 10, attempts: 1, latencyMilliseconds: 52.8,
        tokenFingerprint: "1dc680413d2f03b8", completedAt: utc(2026, 11, 22, 10, 31, 2, 130), bundleId: scoresApp.bundleId,
        attributesType: "ScoreAttributes", channelId: "dHN0LXNyY2gtY2hubA==", contentSequence: 1, apnsTimestamp: 1_795_343_400)

    /// Match 7's memory: its broadcasts go on this channel, and a fan's phone starts on it.
    static let contentMemoryRecordChannel = ContentMemoryRecord(
        activity: .init(
            bundleId: scoresApp.bundleId, activityId: "match-7", partition: 5, lastSequence: 14, lastTimestamp: 1_795_343_400, lastState: "live",
            startedAt: utc(2026, 11, 22, 9, 0, 1, 380), channelId: "dHN0LXNyY2gtY2hubA=="),
        writtenAt: utc(2026, 11, 22, 10, 30, 5, 12))

    static let pushOutcome = PushOutcome(
        requestId: "761FBAD2-5120-49C1-A1CB-D688796ADE2B", activityId: "order-42", result: .delivered,
        apns: .init(status: 200, apnsId: "761FBAD2-5120-49C1-A1CB-D688796ADE2B"), priorityUsed: 10, attempts: 1,
        latencyMilliseconds: 187.6, tokenFingerprint: "48160203cc296dc0", completedAt: utc(2026, 11, 22, 10, 15, 30, 402),
        bundleId: foodApp.bundleId, attributesType: "DeliveryAttributes", contentSequence: 3, apnsTimestamp: 1_795_083_330)

    static let pushOutcomeTokenInvalid = PushOutcome(
        requestId: "5A0FA772-2594-4FEB-A31A-BD2B593AEA89", activityId: "ride-7f3a9c", result: .tokenInvalid,
        apns: .init(
            status: 410, reason: "Unregistered", apnsId: "5A0FA772-2594-4FEB-A31A-BD2B593AEA89", timestamp: utc(2026, 11, 22, 8, 41, 17)),
        priorityUsed: 10, attempts: 1, latencyMilliseconds: 95.25, tokenFingerprint: "ed53cfd0932de6c9",
        detail: "APNs 410 Unregistered: the token is no longer valid", completedAt: utc(2026, 11, 22, 9, 12, 44, 871),
        bundleId: rideApp.bundleId, attributesType: "RideAttributes")

    /// APNs's 410 for the copy sent to the order's second device: that device's token only.
    static let pushOutcomeDeviceCopy = PushOutcome(
        requestId: "3E9B1C57-0D2A-5F64-8B17-C4A92E6D0F83", activityId: "order-42", result: .tokenInvalid,
        apns: .init(status: 410, reason: "Unregistered", apnsId: "3E9B1C57-0D2A-5F64-8B17-C4A92E6D0F83", timestamp: utc(2026, 11, 22, 10, 9, 0)),
        priorityUsed: 10, attempts: 1, latencyMilliseconds: 61.5, tokenFingerprint: "7a21c94e0b3d58f6",
        detail: "APNs 410 Unregistered: the token is no longer valid", completedAt: utc(2026, 11, 22, 10, 15, 30, 402),
        bundleId: foodApp.bundleId, attributesType: "DeliveryAttributes", contentSequence: 5, deviceId: "C2D4E6F8-1A3B-4C5D-8E7F-90A1B2C3D4E5")

    static let pushOutcomePushToStart = PushOutcome(
        requestId: "EBB93B8D-EF2E-4821-9238-20A483574786", pushToStartKey: pushToStartKey, result: .delivered,
        apns: .init(status: 200, apnsId: "EBB93B8D-EF2E-4821-9238-20A483574786"), priorityUsed: 10, attempts: 1,
        latencyMilliseconds: 143.5, tokenFingerprint: "1dc680413d2f03b8", completedAt: utc(2026, 11, 22, 10, 2, 10, 99),
        bundleId: foodApp.bundleId, attributesType: "DeliveryAttributes")

    /// The widget push, delivered (opportunistically: priority 5).
    static let pushOutcomeWidget = PushOutcome(
        requestId: "0F6B3E2A-91C4-5D7E-8A2B-4C6D8E0F1A3B", result: .delivered,
        apns: .init(status: 200, apnsId: "0F6B3E2A-91C4-5D7E-8A2B-4C6D8E0F1A3B"), priorityUsed: 5, attempts: 1, latencyMilliseconds: 61.2,
        tokenFingerprint: "6f58730e4953fcd5", completedAt: utc(2026, 11, 22, 10, 22, 20, 580), bundleId: foodApp.bundleId,
        attributesType: "OrderStatusWidget", contentSequence: 3, widgetKey: widgetKey)

    /// content-service's later verdict on that push-to-start: no update token of order 42 within 60 s.
    static let pushOutcomeStartUnconfirmed = PushOutcome(
        requestId: "EBB93B8D-EF2E-4821-9238-20A483574786", pushToStartKey: pushToStartKey, result: .startUnconfirmed, attempts: 1,
        tokenFingerprint: "1dc680413d2f03b8",
        detail: "APNs accepted the push-to-start, and no update token of the activity came from the app within 60 s",
        completedAt: utc(2026, 11, 22, 10, 3, 10, 99), bundleId: foodApp.bundleId, attributesType: "DeliveryAttributes",
        startActivityId: "order-42")

    /// The push-to-start's announcement, written (and acknowledged) before it was sent.
    static let pushOutcomeSending = PushOutcome(
        requestId: "EBB93B8D-EF2E-4821-9238-20A483574786", pushToStartKey: pushToStartKey, result: .sending, attempts: 1,
        tokenFingerprint: "1dc680413d2f03b8", detail: "push-to-start about to be sent", completedAt: utc(2026, 11, 22, 10, 2, 9, 956),
        bundleId: foodApp.bundleId, attributesType: "DeliveryAttributes", contentSequence: 1, announcementId: "1f3a9c2e07d4b-8c51e6a0f29b3")

    static let pushOutcomeCoalesced = PushOutcome(
        requestId: "41482ABD-1BF0-4A3C-BDFA-483C5B7DB965", activityId: "order-42", result: .coalesced, attempts: 0,
        supersededBy: "761FBAD2-5120-49C1-A1CB-D688796ADE2B", detail: "replaced by newer content before it was sent",
        completedAt: utc(2026, 11, 22, 10, 15, 30, 230), bundleId: foodApp.bundleId, attributesType: "DeliveryAttributes")

    static let pushOutcomeMinimal = PushOutcome(
        requestId: "89E99B52-1A63-47D1-B995-6016882F37C4", activityId: "order-42", result: .failed, attempts: 3,
        completedAt: utc(2026, 11, 22, 10, 31, 9, 4))

    // MARK: Clicks

    static let clickEvent = ClickEvent(
        clickId: "5c1f0e9ab83d4f27a6e1b09d4c7e2a5f", activityId: "order-42", attributesType: "DeliveryAttributes",
        surface: .lockScreen, element: "trackOrder", contentSequence: 5, app: foodApp, appVersion: "5.12.0", osVersion: "26.1",
        keyId: "k2026-11", issuedAt: utc(2026, 11, 22, 10, 15, 30, 214), tappedAt: utc(2026, 11, 22, 10, 16, 5, 250),
        receivedAt: utc(2026, 11, 22, 10, 16, 5, 611))

    static let rejectedClick = RejectedClick(
        reason: .badSignature, detail: "signature does not match the parameters (key k2026-11)",
        url: "fooddelivery://order/42?isl_a=order-42&isl_t=DeliveryAttributes&isl_s=lockScreen&isl_e=trackOrder&isl_q=7&isl_i=1795342530&isl_k=k2026-11&isl_sig=Jx3kP0o9cW5Zb1mR7tQ2vA",
        tappedAt: utc(2026, 11, 22, 10, 17, 12, 4), appVersion: "5.12.0", osVersion: "26.1", clientId: "203.0.113.7",
        receivedAt: utc(2026, 11, 22, 10, 17, 12, 398))

    // MARK: DeadLetterRecord

    /// An activity event its producer wrote without `urgency`.
    static let deadLetteredValue = Array(
        #"{"schemaVersion":1,"eventId":"orders-outbox-88342","activityId":"order-42","kind":"update","attributesType":"DeliveryAttributes","fields":{"status":"delivered"},"occurredAt":"2026-11-22T10:20:01.250Z","sequence":6}"#
            .utf8)

    static let deadLetterRecord = DeadLetterRecord(
        reason: .undecodable, detail: "ActivityEvent: required field urgency is missing",
        origin: .init(topic: "islet.activity-events.v1", partition: 17, offset: 482_113, timestamp: utc(2026, 11, 22, 10, 20, 1, 337)),
        originalKey: "order-42", originalValue: deadLetteredValue, service: "content-service",
        deadLetteredAt: utc(2026, 11, 22, 10, 20, 1, 402))
}

/// A UTC date, built without `IsletDate` so that tests of it are not circular.
func utc(_ year: Int, _ month: Int, _ day: Int, _ hour: Int, _ minute: Int, _ second: Int, _ millisecond: Int = 0) -> Date {
    var calendar = Calendar(identifier: .gregorian)
    calendar.timeZone = TimeZone(identifier: "UTC")!
    let whole = calendar.date(from: DateComponents(year: year, month: month, day: day, hour: hour, minute: minute, second: second))!
    let milliseconds = Int64(whole.timeIntervalSince1970.rounded()) * 1_000 + Int64(millisecond)
    return Date(timeIntervalSince1970: Double(milliseconds) / 1_000)
}
