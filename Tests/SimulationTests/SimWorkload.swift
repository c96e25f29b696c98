import ContentService
import Foundation
import IsletMessages

/// The app and the backend side, as content-service and token-registry put them on the topics:
/// activities started by the app (its update token registered at once) or by push-to-start (the
/// device's push-to-start token registered first; the activity's own token once the phone started
/// it), updates at random intervals — bursts among them, some alerting (never coalesced), at
/// priority 10 or 5 — then an end. Requests carry content-service's sequence and timestamp rules.
/// The writer of requests meets Kafka's faults as content-service does: a refused request is sent
/// again after a backoff (later requests of the activity may land before it), a request whose
/// acknowledgement was lost is sent again (a copy on the topic).
final class SimWorkload {
    struct Plan {
        var activityId: String
        var device: String
        var byPushToStart: Bool
        var startAt: TimeInterval
        var updates: [(after: TimeInterval, alerting: Bool, priority: Int)]
        var endAlerting: Bool
    }

    unowned let world: SimWorld
    private(set) var plans: [Plan] = []
    private var devices: [String: String] = [:]
    private var lastTimestamp: [String: Int64] = [:]
    private var updateTokens: [String: String] = [:]
    let app = AppTarget(bundleId: SimWorld.bundleId, environment: .production)

    init(world: SimWorld) { self.world = world }

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
        }
        world.phones.onStarted = { [weak self] activityId, device in
            guard let self else { return }
            // The app learns the activity's token from iOS, then registers it.
            self.world.scheduler.after(self.world.random.seconds(0.2, 3)) { self.registerUpdateToken(activityId, device: device) }
        }
        for index in 0..<activities {
            let burst = random.chance(0.3)
            var updates: [(TimeInterval, Bool, Int)] = []
            for _ in 0..<random.int(2...8) {
                updates.append((burst ? random.seconds(0.01, 0.5) : random.seconds(0.5, duration / 8), random.chance(0.25), random.chance(0.7) ? 10 : 5))
            }
            let plan = Plan(
                activityId: "order-\(index)", device: "DEVICE-\(random.int(0...(deviceCount - 1)))", byPushToStart: random.chance(0.45),
                startAt: random.seconds(0, duration / 4), updates: updates, endAlerting: random.chance(0.3))
            plans.append(plan)
            world.scheduler.after(plan.startAt) { [weak self] in self?.begin(plan) }
        }
    }

    private func begin(_ plan: Plan) {
        if plan.byPushToStart {
            produce(request(plan.activityId, event: .start, sequence: 0, alerting: true, priority: 10, pushToStart: Self.pushToStartKey(device: plan.device)))
        } else {
            world.phones.startLocally(plan.activityId, device: plan.device, token: "")
            registerUpdateToken(plan.activityId, device: plan.device)
        }
        var at: TimeInterval = 0
        // Now and then the app's token stops working for a while (APNs answers 410, timestamped
        // when it stopped) and the app registers it again; APNs learns of that a moment later,
        // and may answer 410 meanwhile, timestamped before the new registration. The activity
        // goes on: its end comes well after.
        var endNotBefore: TimeInterval = 0
        if !plan.byPushToStart, world.random.chance(0.35) {
            let deadAt = world.random.seconds(0.5, 20)
            let backAt = deadAt + world.random.seconds(0.5, 25)
            let apnsLag = world.random.seconds(0, 5)
            endNotBefore = backAt + apnsLag + 10
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
        for (index, update) in plan.updates.enumerated() {
            at += update.after
            world.scheduler.after(at) { [weak self] in
                guard let self else { return }
                self.produce(self.request(plan.activityId, event: .update, sequence: Int64(index + 1), alerting: update.alerting, priority: update.priority))
            }
        }
        at = max(at + world.random.seconds(0.1, 10), endNotBefore)
        world.scheduler.after(at) { [weak self] in
            guard let self else { return }
            self.produce(self.request(plan.activityId, event: .end, sequence: Int64(plan.updates.count + 1), alerting: plan.endAlerting, priority: 10))
        }
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

    /// A request as content-service makes it: its timestamp by content-service's rule (``ContentTimestamps``).
    private func request(_ activityId: String, event: ActivityEventKind, sequence: Int64, alerting: Bool, priority: Int, pushToStart: String? = nil)
        -> PushRequest
    {
        let timestamp = ContentTimestamps.next(wanted: ContentTimestamps.seconds(world.now), now: world.now, last: lastTimestamp[activityId])
        lastTimestamp[activityId] = timestamp
        // The registration content-service's token table holds for the request's key (it reads the
        // tokens topic a little behind, now and then seconds behind).
        let key = pushToStart ?? MessageKey.activity(bundleId: SimWorld.bundleId, activityId: activityId)
        let lag = world.random.chance(0.05) ? world.random.seconds(1, 10) : world.random.seconds(0.001, 0.3)
        let registeredAt = world.tokenRecord(forKey: key, asOf: world.now.addingTimeInterval(-lag))?.registeredAt
        var aps = "\"timestamp\":\(timestamp),\"event\":\"\(event.rawValue)\",\"content-state\":{\"seq\":\(sequence),\"note\":\"a/b\"}"
        if alerting { aps += ",\"alert\":{\"title\":\"Order\",\"body\":\"#\(sequence)\"},\"sound\":\"default\"" }
        return PushRequest(
            requestId: world.random.uuid(), activityId: pushToStart == nil ? activityId : nil, pushToStartKey: pushToStart, event: event, app: app,
            attributesType: SimWorld.attributesType, payload: "{\"aps\":{\(aps)}}", priority: priority, urgency: priority == 10 ? .important : .routine,
            supersedable: event == .update && !alerting, alerting: alerting, apnsTimestamp: timestamp, contentSequence: sequence, createdAt: world.now,
            sourceActivityId: activityId, tokenRegisteredAt: registeredAt)
    }

    /// content-service's send: until Kafka acknowledges it.
    private func produce(_ request: PushRequest, delay: Double = 0.1) {
        let world = self.world
        let refused = world.random.chance(world.faults.produceRefused)
        let ackLost = !refused && world.random.chance(world.faults.produceAckLost)
        world.scheduler.after(world.random.seconds(0.001, 0.03)) { [weak self] in
            guard let self else { return }
            if !refused { world.append(.request(request), key: request.key ?? "", writer: "content-service") }
            if refused || ackLost {
                world.trace("content-service: request \(request.requestId.prefix(8)) \(refused ? "refused" : "stored, acknowledgement lost"): sent again")
                world.scheduler.after(world.random.seconds(delay, delay * 20)) { self.produce(request, delay: min(delay * 2, 5)) }
            } else {
                world.acknowledged.insert(request.requestId)
            }
        }
    }
}
