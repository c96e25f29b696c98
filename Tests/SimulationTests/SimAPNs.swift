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
    private var taken: Set<String> = []

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
    private var dead: [String: Date] = [:]
    private var buzzes: [String: Int] = [:]
    private var delivered: Set<String> = []
    /// Called when an activity appears on a phone by push-to-start (the app then registers its token).
    var onStarted: ((String, String) -> Void)?

    init(world: SimWorld) { self.world = world }

    func addToken(_ token: String, device: String, activityId: String?) { tokens[token] = (device, activityId) }

    /// An activity the app started itself.
    func startLocally(_ activityId: String, device: String, token: String) {
        activities[activityId] = Activity(device: device, token: token)
    }

    /// The token is no longer valid since `date` (the app was deleted).
    func unregister(_ token: String, since date: Date) { dead[token] = date }
    func reregister(_ token: String) { dead[token] = nil }
    func deadSince(token: String) -> Date? { dead[token] }

    func receive(_ push: APNsPush, token: String, request: PushRequest?) {
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
            let activityId = request.sourceActivityId ?? ""
            if let existing = activities[activityId] {
                world.violate(
                    "one activity",
                    "push-to-start \(request.requestId.prefix(8)) made a second activity \(activityId) on \(target.device) (the first \(existing.ended ? "ended" : "live"))")
                return
            }
            world.trace("phone \(target.device): activity \(activityId) started by push")
            activities[activityId] = Activity(device: target.device, token: "")
            onStarted?(activityId, target.device)
            return
        }
        guard let activityId = target.activityId, var activity = activities[activityId] else { return }
        let repeated = !delivered.insert(request.requestId).inserted
        // A repeat of content the phone had (sent again by the next owner of a partition whose
        // dispatcher lost its session before the outcome was written) is no older content.
        let unrecorded = (repeated && world.sentTwiceAllowed.contains(request.requestId))
            || (world.unrecordedNewest[activityId] ?? .min) >= activity.deliveredSequence
        if request.contentSequence < activity.deliveredSequence && !unrecorded {
            world.violate(
                "older after newer",
                "\(request.event.rawValue) #\(request.contentSequence) (\(request.requestId.prefix(8))) reached \(activityId) after #\(activity.deliveredSequence)")
        }
        activity.deliveredSequence = max(activity.deliveredSequence, request.contentSequence)
        if request.apnsTimestamp > activity.shownTimestamp || activity.shownTimestamp == .min {
            activity.shownTimestamp = request.apnsTimestamp
            activity.shownSequence = request.contentSequence
        }
        if request.event == .end { activity.ended = true }
        activities[activityId] = activity
        world.trace("phone \(target.device): \(activityId) shows #\(activity.shownSequence)\(activity.ended ? " (ended)" : "")")
    }

    func setToken(_ token: String, of activityId: String) { activities[activityId]?.token = token }

    /// Every activity that appeared on a phone ended, unless its token died.
    func checkAtEnd() {
        for (activityId, activity) in activities.sorted(by: { $0.key < $1.key }) where !activity.ended {
            if dead[activity.token] != nil { continue }
            world.violate("activity ends", "activity \(activityId) on \(activity.device) never ended (shows #\(activity.shownSequence))")
        }
    }
}
