import ContentService
import Foundation
import IsletMessages

/// The app and the backend: activities started by the app (its update token registered at once)
/// or by push-to-start (the device's push-to-start token registered first; the activity's own
/// token once the phone started it), the backend's events on `islet.activity-events.v1` — the
/// order's states in turn (three of them alert), at random intervals, bursts among them, with
/// urgencies that ask for priority 10 or 5 — then its end. content-service turns them into
/// requests. Now and then a token stops working for a while and the app registers it again.
final class SimWorkload {
    struct Plan {
        var activityId: String
        var device: String
        var byPushToStart: Bool
        var startAt: TimeInterval
        var updates: [(after: TimeInterval, urgency: Urgency)]
    }

    unowned let world: SimWorld
    /// Scheduled steps are drawn from a stream of their own: the rest of a seed's workload stays what it was.
    private lazy var stepRandom = SimRandom(seed: world.seed ^ 0x57E9_5CED_0A11_17ED)
    private(set) var plans: [Plan] = []
    /// Whether some activities the app started are followed on a second device of the same user
    /// (an iPad): its own Live Activity and update token, the device's record of the activity
    /// (issue 60 item 4). Drawn from a stream of their own.
    var secondDevices = true
    private lazy var deviceRandom = SimRandom(seed: world.seed ^ 0x2DE7_1CE5_5EC0_4D11)
    /// Whether each user has an iPad with a push-to-start token, and some starts go to every
    /// device of the user (``ActivityEvent/PushToStartTarget/userId``). Drawn from a stream of their own.
    var userStarts = true
    private lazy var userStartRandom = SimRandom(seed: world.seed ^ 0x05E2_57A2_7D3E_71CE)
    /// Whether some phones have the app's order widget, registered for WidgetKit pushes (issue 61
    /// item 1): the user's activities' state changes and ends reload it. Drawn from a stream of its own.
    var widgets = true
    private lazy var widgetRandom = SimRandom(seed: world.seed ^ 0x3D6E_7A11_0B5E_C0DE)
    /// Phones whose widget token is registered.
    private(set) var widgetCount = 0
    private(set) var secondDeviceCount = 0
    /// Starts sent to every device of a user.
    private(set) var userStartCount = 0
    private var devices: [String: String] = [:]
    private var updateTokens: [String: String] = [:]
    let app = AppTarget(bundleId: SimWorld.bundleId, environment: .production)

    init(world: SimWorld) { self.world = world }

    /// The widget kind the delivery template refreshes.
    static let widgetKind = "OrderStatusWidget"

    static func pushToStartKey(device: String) -> String {
        MessageKey.pushToStart(bundleId: SimWorld.bundleId, deviceId: device, attributesType: SimWorld.attributesType)
    }

    /// Draws the run's activities and schedules everything they do.
    func plan(activities: Int, devices deviceCount: Int, duration: TimeInterval) {
        let random = world.random
        for index in 0..<deviceCount {
            let device = "DEVICE-\(index)"
            let token = random.hex(bytes: 32)
            devices[device] = token
            world.phones.addToken(token, device: device, activityId: nil)
            register(TokenRecord(
                kind: .pushToStart, deviceId: device, userId: "user-\(index)", token: token, app: app, attributesType: SimWorld.attributesType,
                frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: world.now, updatedAt: world.now),
                key: Self.pushToStartKey(device: device))
            // The same user's iPad, which a start to the user reaches too (issue 60 item 4).
            if userStarts {
                let pad = device + Self.secondDeviceSuffix
                let padToken = userStartRandom.hex(bytes: 32)
                world.phones.addToken(padToken, device: pad, activityId: nil)
                register(TokenRecord(
                    kind: .pushToStart, deviceId: pad, userId: "user-\(index)", token: padToken, app: app, attributesType: SimWorld.attributesType,
                    frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: world.now, updatedAt: world.now),
                    key: Self.pushToStartKey(device: pad))
            }
        }
        // The order widget on a few phones: its token is the user's ("user", whose the app's
        // activities are), so each of those activities' state changes reloads it on every one.
        if widgets {
            for index in 0..<min(deviceCount, widgetRandom.int(0...3)) {
                let device = "DEVICE-\(index)"
                let token = widgetRandom.hex(bytes: 32)
                world.phones.addWidgetToken(token, device: device)
                widgetCount += 1
                register(TokenRecord(
                    kind: .widget, deviceId: device, userId: "user", token: token, app: app, attributesType: Self.widgetKind,
                    frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, registeredAt: world.now, updatedAt: world.now),
                    key: MessageKey.widget(bundleId: SimWorld.bundleId, deviceId: device, kind: Self.widgetKind))
            }
        }
        world.phones.onStarted = { [weak self] activityId, device in
            guard let self else { return }
            // The app learns the activity's token from iOS, then registers it (the iPad's as that device's record).
            if Self.isSecondDevice(device) {
                // (The app reports when its activity started: now, as iOS started it.)
                let startedAt = self.world.now
                self.world.scheduler.after(self.userStartRandom.seconds(0.2, 3)) {
                    self.registerSecondDeviceToken(activityId, device: device, startedAt: startedAt)
                }
            } else {
                self.world.scheduler.after(self.world.random.seconds(0.2, 3)) { self.registerUpdateToken(activityId, device: device) }
            }
        }
        for index in 0..<activities {
            let burst = random.chance(0.3)
            var updates: [(TimeInterval, Urgency)] = []
            for _ in 0..<random.int(2...8) {
                updates.append((burst ? random.seconds(0.01, 0.5) : random.seconds(0.5, duration / 8), random.pick([.routine, .important, .important, .critical])))
            }
            // Now and then the backend goes quiet for minutes: the content goes stale on the
            // phone, and content-service's freshness monitor sends it again.
            if random.chance(0.3) {
                let quiet = random.int(0...(updates.count - 1))
                updates[quiet].0 += random.seconds(150, 500)
            }
            let plan = Plan(
                activityId: "order-\(index)", device: "DEVICE-\(random.int(0...(deviceCount - 1)))", byPushToStart: random.chance(0.45),
                startAt: random.seconds(0, duration / 4), updates: updates)
            plans.append(plan)
            world.scheduler.after(plan.startAt) { [weak self] in self?.begin(plan) }
        }
    }

    /// The order's states in turn (``SimContent/templates``' DeliveryAttributes): out for delivery,
    /// arriving and delivered alert.
    static let states = ["preparing", "courier_assigned", "out_for_delivery", "arriving"]

    private func begin(_ plan: Plan) {
        if plan.byPushToStart {
            // Now and then to every device of the user: the phone and the iPad.
            let user = "user-" + plan.device.dropFirst("DEVICE-".count)
            let target: ActivityEvent.PushToStartTarget =
                userStarts && userStartRandom.chance(0.4) ? .init(app: app, userId: user) : .init(app: app, deviceId: plan.device)
            if target.userId != nil { userStartCount += 1 }
            send(plan.activityId, .start, sequence: 1, status: "placed", urgency: .important, startTarget: target)
        } else {
            world.phones.startLocally(plan.activityId, device: plan.device, token: "")
            registerUpdateToken(plan.activityId, device: plan.device)
            // The backend's start, a moment later: the app started the activity, its first content is an update.
            world.scheduler.after(world.random.seconds(0.05, 2)) { [self] in
                send(plan.activityId, .start, sequence: 1, status: "placed", urgency: .important)
            }
        }
        var at: TimeInterval = 2
        // Now and then the app's token stops working for a while (APNs answers 410, timestamped
        // when it stopped) and the app registers it again; APNs learns of that a moment later,
        // and may answer 410 meanwhile, timestamped before the new registration. The activity
        // goes on: its end comes well after.
        var endNotBefore: TimeInterval = 0
        if !plan.byPushToStart, secondDevices, deviceRandom.chance(0.3) {
            endNotBefore = followOnSecondDevice(plan)
        }
        if !plan.byPushToStart, world.random.chance(0.35) {
            let deadAt = world.random.seconds(2.5, 20)
            let backAt = deadAt + world.random.seconds(0.5, 25)
            let apnsLag = world.random.seconds(0, 5)
            endNotBefore = max(endNotBefore, backAt + apnsLag + 10)
            world.scheduler.after(deadAt) { [self] in
                guard let token = updateTokens[plan.activityId] else { return }
                world.trace("phone \(plan.device): the token of \(plan.activityId) stops working")
                world.phones.unregister(token, since: world.now)
            }
            world.scheduler.after(backAt) { [self] in
                guard let token = updateTokens[plan.activityId] else { return }
                world.trace("phone \(plan.device): the app registers the token of \(plan.activityId) again")
                world.phones.reregister(token, apnsLag: apnsLag)
                registerUpdateToken(plan.activityId, device: plan.device)
            }
        }
        // Now and then the backend plans the arrival ("at 12:41 show arriving"): a step above every
        // update's sequence, sent after one of the updates, shown 3 to 60 s later; sometimes moved
        // (the ETA changed) before its time; the end comes well after it.
        let step = endNotBefore == 0 && stepRandom.chance(0.35)
        let stepAfter = stepRandom.int(0...(plan.updates.count - 1))
        var stepDue: TimeInterval = 0
        for (index, update) in plan.updates.enumerated() {
            at += update.after
            let status = Self.states[min(index, Self.states.count - 1)]
            world.scheduler.after(at) { [weak self] in
                self?.send(plan.activityId, .update, sequence: Int64(index + 2), status: status, urgency: update.urgency, progress: Double(index * 10))
            }
            if step, index == stepAfter {
                let sentAt = at + stepRandom.seconds(0.01, 2)
                stepDue = scheduleStep(plan.activityId, version: "s", sentAt: sentAt, dueIn: stepRandom.seconds(3, 60))
                if stepRandom.chance(0.3) {
                    let movedAt = sentAt + stepRandom.seconds(0.5, 2.5)
                    stepDue = max(stepDue, scheduleStep(plan.activityId, version: "m", sentAt: movedAt, dueIn: stepRandom.seconds(3, 60)))
                }
            }
        }
        at = max(at + world.random.seconds(0.1, 10), endNotBefore)
        if step { at = max(at, stepDue + 60) }
        let endSequence = step ? Self.endAfterStep : Int64(plan.updates.count + 2)
        world.scheduler.after(at) { [weak self] in
            self?.send(plan.activityId, .end, sequence: endSequence, status: "delivered", urgency: .important)
        }
    }

    /// A second device's id ends so (an iPad: the first device's user's).
    static let secondDeviceSuffix = "-PAD"
    static func isSecondDevice(_ device: String) -> Bool { device.hasSuffix(secondDeviceSuffix) }

    /// The iPad a start to the user reached registers its token of the activity: that device's record.
    private func registerSecondDeviceToken(_ activityId: String, device: String, startedAt: Date) {
        let shown = Self.shownId(activityId, deviceId: device)
        let token = userStartRandom.hex(bytes: 32)
        world.phones.addToken(token, device: device, activityId: shown)
        world.phones.setToken(token, of: shown)
        world.trace("phone \(device): the app registers its own token of \(activityId)")
        register(TokenRecord(
            kind: .update, activityId: activityId, deviceId: device, userId: "user", token: token, app: app,
            attributesType: SimWorld.attributesType, frequentUpdatesEnabled: false, appVersion: "1.0", state: .active,
            activityStartedAt: startedAt, registeredAt: world.now, updatedAt: world.now, deviceKeyed: true),
            key: MessageKey.device(bundleId: SimWorld.bundleId, activityId: activityId, deviceId: device))
    }

    /// The activity `activityId` as the phones model shows it on `deviceId` when that is not its
    /// first device (``SimPhones`` keeps one entry per activity and device).
    static func shownId(_ activityId: String, deviceId: String?) -> String {
        deviceId.map { "\(activityId)@\($0)" } ?? activityId
    }

    /// The same user follows the order on a second device: the app there starts its own Live
    /// Activity and registers its token (the device's record), within a few seconds of the first
    /// device's; now and then the app is deleted there later (APNs answers 410 for that token
    /// only). Its registration may come late, after the activity's end was made (content-service
    /// then sends the end to it). Returns when the end may come.
    private func followOnSecondDevice(_ plan: Plan) -> TimeInterval {
        secondDeviceCount += 1
        let device = plan.device + Self.secondDeviceSuffix
        let shown = Self.shownId(plan.activityId, deviceId: device)
        let token = deviceRandom.hex(bytes: 32)
        world.phones.startLocally(shown, device: device, token: token)
        world.phones.addToken(token, device: device, activityId: shown)
        let (registerAt, startedAt) = (deviceRandom.seconds(0.05, 3), world.now)
        world.scheduler.after(registerAt) { [self] in
            world.trace("phone \(device): the app registers its own token of \(plan.activityId)")
            register(TokenRecord(
                kind: .update, activityId: plan.activityId, deviceId: device, userId: "user", token: token, app: app,
                attributesType: SimWorld.attributesType, frequentUpdatesEnabled: false, appVersion: "1.0", state: .active,
                activityStartedAt: startedAt, registeredAt: world.now, updatedAt: world.now, deviceKeyed: true),
                key: MessageKey.device(bundleId: SimWorld.bundleId, activityId: plan.activityId, deviceId: device))
        }
        if deviceRandom.chance(0.3) {
            world.scheduler.after(registerAt + deviceRandom.seconds(1, 30)) { [self] in
                world.trace("phone \(device): the app is deleted (the token of \(plan.activityId) there stops working)")
                world.phones.unregister(token, since: world.now)
            }
        }
        return 0
    }

    /// A step's sequence: above every update's. The end's, after a step: above it.
    static let stepSequence: Int64 = 1_000
    static let endAfterStep: Int64 = 2_000

    /// The backend sends, at `sentAt`, the step "arriving" to be shown `dueIn` seconds later (the
    /// same sequence each time: a second version moves the first). Returns when it is due.
    private func scheduleStep(_ activityId: String, version: String, sentAt: TimeInterval, dueIn: TimeInterval) -> TimeInterval {
        let eventId = "\(activityId)-e\(Self.stepSequence)\(version)"
        world.stepVersions[activityId, default: []].append(eventId)
        world.scheduler.after(sentAt) { [weak self] in
            guard let self else { return }
            let due = world.now.addingTimeInterval(dueIn)
            world.stepTimes[eventId] = due
            send(activityId, .update, sequence: Self.stepSequence, status: "arriving", urgency: .important, progress: 90, at: due, eventId: eventId)
        }
        return sentAt + dueIn
    }

    private func registerUpdateToken(_ activityId: String, device: String) {
        let token = updateTokens[activityId] ?? world.random.hex(bytes: 32)
        updateTokens[activityId] = token
        world.phones.addToken(token, device: device, activityId: activityId)
        world.phones.setToken(token, of: activityId)
        register(TokenRecord(
            kind: .update, activityId: activityId, userId: "user", token: token, app: app, attributesType: SimWorld.attributesType,
            frequentUpdatesEnabled: false, appVersion: "1.0", state: .active, activityStartedAt: world.now, registeredAt: world.now,
            updatedAt: world.now), key: MessageKey.activity(bundleId: SimWorld.bundleId, activityId: activityId))
    }

    /// token-registry's write (awaited until acknowledged: the app got its 201).
    private func register(_ record: TokenRecord, key: String) {
        world.registry.register(record, key: key)
    }

    /// The backend's event (written once: the backend's producer is not what is under test).
    private func send(
        _ activityId: String, _ kind: ActivityEventKind, sequence: Int64, status: String, urgency: Urgency,
        startTarget: ActivityEvent.PushToStartTarget? = nil, progress: Double = 0, at: Date? = nil, eventId: String? = nil
    ) {
        let fields: [String: JSONValue] = [
            "status": .string(status), "orderId": .string(activityId), "courier": .object(["name": .string("Ana")]), "progress": .number(progress),
        ]
        let event = ActivityEvent(
            eventId: eventId ?? "\(activityId)-e\(sequence)", activityId: activityId, kind: kind, attributesType: SimWorld.attributesType, fields: fields,
            urgency: urgency, occurredAt: world.now, sequence: sequence, startTarget: startTarget,
            attributes: startTarget == nil ? nil : ["orderId": .string(activityId)], bundleId: SimWorld.bundleId, at: at)
        // Half the events come through an instance's API, which assembles them before publishing:
        // mostly the partition's owner (peers forward a call there), else any instance.
        let partition = world.events.partition(ofKey: MessageKey.activity(activityId))
        let intakes = world.contentInstances.filter(\.isUp)
        let owners = intakes.filter { $0.owns(partition) }
        // (A step's draws come from the steps' stream: the other draws of a seed stay where they were.)
        let random = at == nil ? world.random : stepRandom
        if !intakes.isEmpty, random.chance(0.5) { random.pick(!owners.isEmpty && random.chance(0.8) ? owners : intakes).checkAhead(event) }
        world.append(.event(event), key: MessageKey.activity(activityId), writer: "backend")
    }
}
