import ContentService
import Foundation
import IsletMessages
import NIOCore
@testable import APNsDispatcher

/// APNs as the dispatcher meets it: answers 200, 410 (with the time the token stopped being
/// valid), 429 and 5xx; or none — a GOAWAY before processing, a stall before the request was
/// written, a timeout after the phone got it; slow answers. What reaches a phone is what APNs
/// delivered, whatever the dispatcher heard.
final class SimAPNs {
    unowned let world: SimWorld
    /// Requests APNs may have delivered (it took an attempt it did not refuse).
    private(set) var taken: Set<String> = []

    init(world: SimWorld) { self.world = world }

    func mayHaveDelivered(_ requestId: String) -> Bool { taken.contains(requestId) }

    func send(_ attempt: DispatchMachine.Attempt, from dispatcher: SimDispatcher, _ answer: @escaping (Result<APNsAnswer, any Error>) -> Void) {
        let (random, faults) = (world.random, world.faults)
        let push = attempt.push
        let requestId = push.apnsID
        guard case .device(let token, _) = push.destination else { fatalError("broadcasts are not simulated") }
        var latency = random.seconds(0.005, 0.15)
        if random.chance(faults.slowAnswer) { latency = random.seconds(1, 12) }
        let roll = random.unit()
        var threshold = 0.0
        func next(_ probability: Double) -> Bool {
            threshold += probability
            return roll < threshold
        }
        let world = self.world
        let label = "\(dispatcher.name) → APNs: \(requestId.prefix(8)) (attempt \(attempt.entry.attempts), p\(attempt.priority))"
        if next(faults.notProcessed) {
            world.scheduler.after(latency) {
                world.trace("\(label): GOAWAY, not processed")
                answer(.failure(APNsTransportError(.notProcessed, "GOAWAY")))
            }
        } else if next(faults.timeoutBeforeWrite) {
            world.scheduler.after(10) {
                world.trace("\(label): stalled before it was written")
                answer(.failure(APNsTransportError(.stalled, "deadline")))
            }
        } else if next(faults.tooManyRequests) {
            world.scheduler.after(latency) {
                world.trace("\(label): 429")
                answer(.success(APNsAnswer(status: 429, reason: "TooManyRequests", apnsID: requestId)))
            }
        } else if next(faults.serverError) {
            world.scheduler.after(latency) {
                world.trace("\(label): 503")
                answer(.success(APNsAnswer(status: 503, reason: "ServiceUnavailable", apnsID: requestId)))
            }
        } else {
            let lostAnswer = next(faults.timeoutAfterDelivery)
            // Delivered at once; the answer (or its loss) takes the latency.
            world.scheduler.after(latency / 2) { [self] in
                if let dead = world.phones.deadSince(token: token) {
                    world.scheduler.after(latency / 2) {
                        world.trace("\(label): 410 (unregistered since \(dead.timeIntervalSince(SimWorld.start)))")
                        answer(.success(APNsAnswer(status: 410, reason: "Unregistered", timestamp: dead, apnsID: requestId)))
                    }
                    return
                }
                taken.insert(requestId)
                world.phones.receive(push, token: token, request: world.requestsById[requestId])
                world.scheduler.after(latency / 2) {
                    if lostAnswer {
                        world.trace("\(label): delivered, answer lost (timeout)")
                        answer(.failure(APNsTransportError(.timeout, "no answer")))
                    } else {
                        world.trace("\(label): 200")
                        answer(.success(APNsAnswer(status: 200, apnsID: requestId)))
                    }
                }
            }
        }
    }
}

/// The phones: what iOS does with what arrives. A push-to-start makes a new activity (a second one
/// for the same activity id is what must never happen); an update is shown when its timestamp is
/// newer than what is shown; an alert buzzes; an end ends the activity. The app registers an
/// activity's update token once it runs.
final class SimPhones {
    struct Activity {
        var device: String
        var token: String
        var shownSequence: Int64 = -1
        var shownTimestamp: Int64 = .min
        var deliveredSequence: Int64 = -1
        var ended = false
    }

    unowned let world: SimWorld
    /// Activities on phones, by activity id (ids are unique across devices in the workload).
    private(set) var activities: [String: Activity] = [:]
    /// Update and push-to-start tokens, and what they reach: (device, activity id or nil for push-to-start).
    private var tokens: [String: (device: String, activityId: String?)] = [:]
    /// Tokens APNs answers 410 for: since when (the 410's timestamp), and until when (APNs learns
    /// the app registered the token again a moment after the app does).
    private var dead: [String: (since: Date, until: Date?)] = [:]
    private var buzzes: [String: Int] = [:]
    /// What reached each activity, in order: request id and content sequence.
    private var deliveries: [String: [(requestId: String, sequence: Int64)]] = [:]
    /// The versions of a scheduled step each activity showed.
    private var stepsShown: [String: Set<String>] = [:]
    /// How far ahead of the clock an update's timestamp may be: content-service's bound, right
    /// after a partition's assignment and for an end after its alert too (issue 61 item 8).
    static let timestampLead: Int64 = ContentTimestamps.lead
    /// Called when an activity appears on a phone by push-to-start (the app then registers its token).
    var onStarted: ((String, String) -> Void)?

    init(world: SimWorld) { self.world = world }

    func addToken(_ token: String, device: String, activityId: String?) { tokens[token] = (device, activityId) }

    /// Widget tokens (iOS 26 WidgetKit push), and the reloads each device's widget got.
    private var widgetTokens: [String: String] = [:]
    private(set) var widgetReloads = 0
    func addWidgetToken(_ token: String, device: String) { widgetTokens[token] = device }

    /// An activity the app started itself.
    func startLocally(_ activityId: String, device: String, token: String) {
        activities[activityId] = Activity(device: device, token: token)
    }

    /// The token is no longer valid since `date` (the app was deleted).
    func unregister(_ token: String, since date: Date) { dead[token] = (date, nil) }
    /// The app registers the token again; APNs still answers 410 (with the old timestamp) for `lag`.
    func reregister(_ token: String, apnsLag lag: TimeInterval) { dead[token]?.until = world.now.addingTimeInterval(lag) }
    func deadSince(token: String) -> Date? {
        guard let entry = dead[token] else { return nil }
        if let until = entry.until, world.now >= until { return nil }
        return entry.since
    }
    /// Whether APNs would refuse the token at the end of the run.
    func isDead(_ token: String) -> Bool { dead[token].map { $0.until == nil } ?? false }

    func receive(_ push: APNsPush, token: String, request: PushRequest?) {
        // A widget push reaches a widget token only, as a reload and nothing else; a Live Activity
        // push never reaches a widget token.
        if push.pushType == "widgets" || widgetTokens[token] != nil || request?.isWidget == true {
            guard push.pushType == "widgets", request?.isWidget == true, let device = widgetTokens[token],
                String(buffer: push.payload) == PushRequest.widgetPayload, push.priority == 5
            else {
                return world.violate(
                    "widget", "\(push.apnsID.prefix(8)) (\(push.pushType), p\(push.priority)) reached \(widgetTokens[token] ?? tokens[token]?.device ?? "an unknown token") as a widget push: \(String(buffer: push.payload).prefix(60))")
            }
            widgetReloads += 1
            world.trace("phone \(device): the order widget reloads (\(push.apnsID.prefix(8)))")
            return
        }
        guard let request, let target = tokens[token] else { return }
        let payload = String(buffer: push.payload)
        let alerts = payload.contains("\"alert\"")
        if alerts {
            buzzes[request.requestId, default: 0] += 1
            if buzzes[request.requestId]! > 1 {
                world.violate("alert once", "request \(request.requestId.prefix(8)) buzzed \(buzzes[request.requestId]!) times on \(target.device)")
            }
        }
        if request.event == .start, request.pushToStartKey != nil {
            // (A second device of the user, started by the same start: its own entry.)
            let activityId = SimWorkload.shownId(request.sourceActivityId ?? "", deviceId: SimWorkload.isSecondDevice(target.device) ? target.device : nil)
            if let existing = activities[activityId] {
                world.violate(
                    "one activity",
                    "push-to-start \(request.requestId.prefix(8)) made a second activity \(activityId) on \(target.device) (the first \(existing.ended ? "ended" : "live"))")
                return
            }
            world.trace("phone \(target.device): activity \(activityId) started by push")
            activities[activityId] = Activity(device: target.device, token: "")
            onStarted?(request.sourceActivityId ?? "", target.device)
            return
        }
        guard let activityId = target.activityId, var activity = activities[activityId] else { return }
        // What iOS reads: the payload as sent (the request's own fields may differ from a copy's).
        let aps = (try? JSONSerialization.jsonObject(with: Data(payload.utf8)) as? [String: Any])?["aps"] as? [String: Any]
        guard let timestamp = (aps?["timestamp"] as? NSNumber)?.int64Value, let event = aps?["event"] as? String else {
            return world.violate("payload", "\(request.requestId.prefix(8)) reached \(activityId) without aps.timestamp and aps.event")
        }
        if timestamp > Int64(world.now.timeIntervalSince1970) + Self.timestampLead {
            world.violate(
                "timestamps", "\(request.requestId.prefix(8)) of \(activityId) carries a timestamp \(timestamp - Int64(world.now.timeIntervalSince1970)) s ahead")
        }
        // A step is never shown before its time (content-service sends it within a second of it).
        if let eventId = request.sourceEventId, let due = world.stepTimes[eventId], world.now < due.addingTimeInterval(-1) {
            world.violate("step early", "step \(eventId) reached \(activityId) \(due.timeIntervalSince(world.now)) s before its time")
        }
        // Checked at the end, when it is known which deliveries were recorded.
        deliveries[activityId, default: []].append((request.requestId, request.contentSequence))
        if let eventId = request.sourceEventId, world.stepTimes[eventId] != nil { stepsShown[activityId, default: []].insert(eventId) }
        activity.deliveredSequence = max(activity.deliveredSequence, request.contentSequence)
        // iOS drops an update older than what it shows (an equal timestamp is not older): newer
        // content stamped older than what is shown is hidden.
        if timestamp < activity.shownTimestamp && request.contentSequence > activity.shownSequence {
            world.violate(
                "newer hidden",
                "\(activityId) ignores #\(request.contentSequence) (\(request.requestId.prefix(8)), timestamp \(timestamp)): it shows #\(activity.shownSequence), timestamp \(activity.shownTimestamp)")
        }
        if timestamp >= activity.shownTimestamp {
            // (Except a repeat the contract allows — delivered by an owner that lost its partition
            // or was killed before its outcome was written, sent again by the next — stamped equal
            // to what a burst stamped after it: shown until the later ones, sent again after it,
            // arrive. docs/operations.md says so.)
            let allowedRepeat = world.sentTwiceAllowed.contains(request.requestId) && timestamp == activity.shownTimestamp
            if request.contentSequence < activity.shownSequence && !allowedRepeat {
                world.violate(
                    "older shown",
                    "\(activityId) shows #\(request.contentSequence) (\(request.requestId.prefix(8)), timestamp \(timestamp)) after #\(activity.shownSequence)")
            }
            activity.shownTimestamp = timestamp
            activity.shownSequence = request.contentSequence
            // An end older than what is shown is dropped like an update (the activity then never
            // ends: "activity ends" at the end of the run).
            if event == "end" { activity.ended = true }
        }
        activities[activityId] = activity
        world.trace("phone \(target.device): \(activityId) shows #\(activity.shownSequence)\(activity.ended ? " (ended)" : "")")
    }

    func setToken(_ token: String, of activityId: String) { activities[activityId]?.token = token }

    /// Every activity that appeared on a phone ended, unless its token died; no older content
    /// reached an activity after newer content that was recorded as sent. (Content sent by a
    /// dispatcher whose outcome could not be written before it lost its session is the one
    /// allowance: the next owner cannot know it went, and may send older content after it — iOS
    /// shows the newer, by its timestamp.)
    /// `endsGivenUp`: activities whose end the dispatcher gave up waiting for their token: that
    /// the phone shows them still is content-service's to repair once the token comes, which it
    /// does not do yet (docs/operations.md, "Not simulated yet").
    /// `older after newer` passes over a request delivered again (the same content again).
    func checkAtEnd(endsGivenUp: Set<String>) {
        // A moved step is one step: the phone shows one of its versions, never both.
        for (activityId, shown) in stepsShown.sorted(by: { $0.key < $1.key }) where shown.count > 1 {
            world.violate("step once", "\(activityId) showed the step in \(shown.count) versions: \(shown.sorted())")
        }
        // content-service made a request of every step (kept through restarts and rebalances by
        // its changelog), unless the end came first: what happened to the request then is the
        // dispatcher's (coalesced behind the end, refused by APNs), checked as for any request.
        let stepsMade = Set(world.requestsById.values.compactMap(\.sourceEventId)).intersection(world.stepTimes.keys)
        for (activityId, versions) in world.stepVersions.sorted(by: { $0.key < $1.key }) {
            guard let activity = activities[activityId], !isDead(activity.token), !endsGivenUp.contains(activityId),
                !world.stepsSupersededByEnd.contains(activityId), stepsMade.isDisjoint(with: versions)
            else { continue }
            world.violate("step lost", "no request was made of \(activityId)'s step (\(versions.joined(separator: ", "))), and its end did not supersede it")
        }
        for (activityId, list) in deliveries.sorted(by: { $0.key < $1.key }) {
            var newest = Int64.min
            var seen: Set<String> = []
            for delivery in list {
                let repeated = !seen.insert(delivery.requestId).inserted
                if delivery.sequence < newest && !repeated {
                    world.violate("older after newer", "#\(delivery.sequence) (\(delivery.requestId.prefix(8))) reached \(activityId) after #\(newest)")
                }
                if !world.sentTwiceAllowed.contains(delivery.requestId) { newest = max(newest, delivery.sequence) }
            }
        }
        for (activityId, activity) in activities.sorted(by: { $0.key < $1.key }) where !activity.ended {
            if isDead(activity.token) || endsGivenUp.contains(activityId) { continue }
            world.violate("activity ends", "activity \(activityId) on \(activity.device) never ended (shows #\(activity.shownSequence))")
        }
    }
}
