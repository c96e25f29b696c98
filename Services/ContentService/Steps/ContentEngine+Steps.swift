import Foundation
import IsletMessages
import Synchronization

/// Scheduled steps: events a backend sends ahead of their time (``ActivityEvent/at``), "at 12:41
/// show arrived". The activity's memory keeps them (``ActivityMemory/steps``), and with it the
/// changelog (the event that schedules one counts as processed only once a round wrote the
/// activity's memory: ``ContentChanges/afterNextRound(partition:done:abandon:)``), and one ordered
/// queue of the instance (``StepQueue``) finds those due;
/// ``StepSender`` sends each at its time as the event it is, assembled then (the token, app
/// version and alert window of that moment). A step is superseded, never sent, by an event applied
/// first with its sequence or above, by the activity's end, or by a step with the same sequence.
extension ContentEngine {
    /// An event kept for later, and the activity's steps with it.
    public struct Scheduled: Sendable {
        /// The activity, of its app (`<bundleId>/<activityId>`).
        public let activityKey: String
        public let event: ActivityEvent
        /// The partition of the activity's records (the changelog record's too).
        public let partition: Int32?
    }

    /// How far ahead of now an event's `at` must be to be kept for later: nearer, it is sent at once
    /// (the monitor's passes and Kafka's latency are of that order).
    public static let scheduleLead: TimeInterval = 1

    static func isForLater(_ event: ActivityEvent, now: Date) -> Bool {
        event.at.map { $0.timeIntervalSince(now) > scheduleLead } ?? false
    }

    /// An event for later: checked now as it is to be assembled then (its fields against its
    /// template, its sequence, the activity not ended), so that a backend learns now what is wrong.
    func schedule(_ event: ActivityEvent, _ preparation: Preparation, now: Date) throws(ContentError) -> Decision {
        if let ignored = preparation.ignored { return .ignore(ignored) }
        _ = try assemble(event, preparation, images: [:], now: now)
        guard let at = event.at, at.timeIntervalSince(now) <= ActivityEvent.maximumScheduleAhead else {
            throw ContentError(field: "at", problem: "must be at most 8 hours from now (a Live Activity shows updates for 8 hours)")
        }
        var memory = preparation.inputs.memory
        guard memory.steps.filter({ $0.sequence != event.sequence }).count < ActivityMemory.maximumSteps else {
            throw ContentError(
                field: "at",
                problem: "the activity has \(ActivityMemory.maximumSteps) steps scheduled already: send one with the same sequence to change it, or wait for one to pass")
        }
        // Its app as resolved now: at its time another app may have the same activity id live.
        var kept = event
        kept.bundleId = String(preparation.inputs.activityKey.prefix { $0 != "/" })
        memory.schedule(kept)
        return .schedule(Scheduled(activityKey: preparation.inputs.activityKey, event: kept, partition: memory.partition))
    }

    /// The memory keeps the step (the queue of steps finds it at its time). Its event is
    /// processed once the changelog has it (``ContentChanges/afterNextRound(partition:done:abandon:)``).
    public func commit(_ scheduled: Scheduled) {
        let (now, policy) = (clock.date, freshness)
        state.withLock { state in
            var memory = state.memory(scheduled.activityKey) ?? ActivityMemory()
            if memory.partition == nil { memory.partition = scheduled.partition }
            memory.schedule(scheduled.event)
            state.set(scheduled.activityKey, memory, now: now, policy: policy)
        }
    }

    /// A step due now, of an activity of a partition in `owned`.
    public struct DueStep: Sendable {
        public let activityKey: String
        public let event: ActivityEvent
        public let partition: Int32?
    }

    /// Steps sent in one pass at most (the pass holds the whole turn: events wait meanwhile); the
    /// rest go in the next, 200 ms later.
    public static let stepsPerPass = 1_000

    /// The steps whose time has come, of the partitions in `owned` (`nil`: all), the earliest
    /// first, at most ``stepsPerPass``; those of other partitions wait for their owner (looked at
    /// again in a second). Send each through ``prepare(_:partition:images:firing:)`` with `firing`.
    public func dueSteps(owned: Set<Int32>?) -> [DueStep] {
        let now = clock.date
        return state.withLock { state in
            var due: [DueStep] = []
            // (A step queued twice — restored, then its event read again — comes out once.)
            var seen = Set<String>()
            // Entries of superseded or moved steps come out too: taken in batches until enough are due.
            var entries: [StepQueue.Entry] = []
            while due.count < Self.stepsPerPass {
                if entries.isEmpty { entries = state.steps.popDue(now: now, limit: Self.stepsPerPass).reversed() }
                guard let entry = entries.popLast() else { break }
                let (slot, key, memory) = (entry.slot, state.slots[Int(entry.slot)].key, state.slots[Int(entry.slot)].memory)
                // Still kept as it was when queued (not superseded, moved, nor of a forgotten activity).
                guard !key.isEmpty,
                    let event = memory.steps.first(where: { $0.sequence == entry.sequence && $0.at?.timeIntervalSinceReferenceDate == entry.at }),
                    seen.insert("\(entry.slot):\(entry.sequence)").inserted
                else { continue }
                guard ActivityMemories.isOwned(memory, by: owned) else {
                    state.steps.insert(event, slot: slot, at: now.addingTimeInterval(1))
                    continue
                }
                if memory.ended {
                    // (An end read back after the step was restored: it supersedes every step.)
                    state.update(key, now: now, policy: freshness) { $0.dropSteps() }
                    continue
                }
                if memory.gone, deviceTokens(of: key).isEmpty {
                    // Its token is dead (APNs said so), and no other device follows it: looked at
                    // again in a minute, sent if the app registered a token again by then (the
                    // monitor revives the activity).
                    state.steps.insert(event, slot: slot, at: now.addingTimeInterval(60))
                    continue
                }
                due.append(DueStep(activityKey: key, event: event, partition: memory.partition))
            }
            // Due but beyond this pass: back in the queue for the next.
            for entry in entries { state.steps.insert(entry) }
            return due
        }
    }

    /// A due step that is not to be sent after all (ignored: superseded, the activity ended):
    /// the memory lets it go.
    public func dropStep(_ step: DueStep) {
        let (now, policy) = (clock.date, freshness)
        state.withLock { state in
            state.update(step.activityKey, now: now, policy: policy) { memory in
                memory.dropSteps(only: step.event.sequence)
            }
        }
    }

    /// Entries in the queue of steps (tests: bounded).
    var queuedSteps: Int { state.withLock { $0.steps.count } }

    /// The earliest time a step is due, if any is kept (the sender sleeps until then).
    public var nextStepDue: Date? { state.withLock { $0.steps.nextDue } }

    /// The activity's steps, the earliest first (the lookup shows them).
    public func steps(of activityKey: String) -> [ActivityEvent] { state.withLock { $0.memory(activityKey)?.steps ?? [] } }
}
