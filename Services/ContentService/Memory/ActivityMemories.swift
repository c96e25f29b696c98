import Foundation
import HeapModule
import IsletKafka
import IsletMessages

/// The memories of the activities this content-service instance knows (``ActivityMemory``), with
/// what finds and orders them: the index by key, the apps, the push-to-start owners, the freshness
/// classes and each activity's next deadline (``DeadlineQueue``), what changed since the last
/// changelog round (``PartitionChanges``) and the partitions' timestamp floors. Held by the
/// ``ContentEngine`` under one lock.
struct ActivityMemories {
    /// The memories, one per slot; ``index`` finds an activity's slot by its key
    /// (`<bundleId>/<activityId>`: activity ids are scoped per app). A forgotten activity's
    /// slot is reused. About 200 bytes an activity with its key and deadline, where a
    /// dictionary of memories held by key took more than 900 (issue 24).
    var index: [String: Int32] = [:]
    var slots: [Slot] = []
    var freeSlots: [Int32] = []
    /// Memories per app (`bundleId`): an event or outcome that does not name its app is looked
    /// up in each (they are few).
    var apps: [String: Int] = [:]
    /// Push-to-start keys of recent starts → the activity they started (their outcomes carry the key).
    var startOwners: [String: String] = [:]
    /// Request ids of recent push-to-starts → the activity each started: an outcome that comes
    /// late, after another start on the same device took its key (``startOwners``), still finds
    /// its own activity. (Not in the changelog: after a restart, the key decides.)
    var startRequests: [String: (activityKey: String, copy: Bool)] = [:]
    /// Broadcast channels of an app (`<bundleId>/<channelId>`) → the activity each is (was) the
    /// channel of (``ActivityMemory/channelId``, which the changelog keeps): the outcome of a
    /// push-to-start on a channel names the channel, not the activity.
    var channelOwners: [String: String] = [:]

    static func channelKey(bundleId: String, channelId: String) -> String { bundleId + "/" + channelId }

    /// Notes the channel of `key`'s memory in ``channelOwners`` when it is a new one (`previous`: the channel it had).
    private mutating func noteChannel(_ channel: String?, previous: String?, of key: String) {
        guard let channel, channel != previous else { return }
        channelOwners[Self.channelKey(bundleId: String(key.prefix { $0 != "/" }), channelId: channel)] = key
    }

    /// Push-to-starts on a live activity's channel APNs accepted lately (kept twice
    /// ``ContentEngine/channelEndMargin``: an end is made before it is committed), by activity:
    /// when each device's was accepted. Should the activity's end be made within the margin after
    /// one, that device is owed the end again (APNs may hand the start to its phone after the
    /// end's broadcast). Not in the changelog: a couple of minutes of them.
    var recentChannelStarts: [String: [String: Date]] = [:]
    /// The oldest time kept in ``recentChannelStarts`` (nothing to prune before it is old enough).
    var oldestRecentChannelStart: Date?

    /// Notes a device's start on `activityKey`'s channel, accepted at `at`.
    mutating func noteRecentChannelStart(_ activityKey: String, deviceId: String, at: Date, limit: Int) {
        guard recentChannelStarts[activityKey]?.count ?? 0 < limit || recentChannelStarts[activityKey]?[deviceId] != nil else { return }
        recentChannelStarts[activityKey, default: [:]][deviceId] = max(at, recentChannelStarts[activityKey]?[deviceId] ?? at)
        oldestRecentChannelStart = min(oldestRecentChannelStart ?? at, at)
    }

    /// Drops the recent channel starts older than `keep`, once the oldest is.
    mutating func pruneRecentChannelStarts(now: Date, keep: TimeInterval) {
        guard let oldest = oldestRecentChannelStart, now.timeIntervalSince(oldest) > keep else { return }
        recentChannelStarts = recentChannelStarts.compactMapValues { starts in
            let kept = starts.filter { now.timeIntervalSince($0.value) <= keep }
            return kept.isEmpty ? nil : kept
        }
        oldestRecentChannelStart = recentChannelStarts.values.lazy.flatMap(\.values).min()
    }
    /// `startOwners.count` when it was last pruned: pruned again once it doubled (amortised).
    var startOwnersPruned = 0

    /// Notes the push-to-start `request` (of `activityKey`), for its outcome.
    mutating func noteStart(_ request: PushRequest, of activityKey: String) {
        // (A start on the activity's broadcast channel is one more phone's, not the activity's: ``PushRequest/channelId``.)
        guard let key = request.pushToStartKey, !request.joinsChannel else { return }
        startOwners[key] = activityKey
        startRequests[request.requestId] = (activityKey, request.isStartCopy)
    }

    /// Drops the push-to-start owners of activities forgotten.
    mutating func dropForgottenStartOwners() {
        startOwners = startOwners.filter { index[$0.value] != nil }
        startRequests = startRequests.filter { index[$0.value.activityKey] != nil }
        channelOwners = channelOwners.filter { index[$0.value] != nil }
        startOwnersPruned = startOwners.count + startRequests.count + channelOwners.count
    }
    /// When the monitor is to look at each activity next.
    var deadlines = DeadlineQueue()
    /// The activities' scheduled steps by their time.
    var steps = StepQueue()
    /// Steps queued when the queue was last made again from the memories.
    var stepsAtRebuild = 0
    /// The live activities that were not fresh when last looked at, and their class. Exact as
    /// long as the clock does not step back: a class changes by time alone only at a deadline.
    var notFresh: [Int32: Freshness] = [:]
    var notFreshCounts: [Freshness: Int] = [:]
    /// Activities remembered live (``ActivityMemory/isLive``: not ended, token alive).
    var liveCount = 0
    /// Activities whose token is dead (``ActivityMemory/gone``). No deadline revives them (a token
    /// registered again does, which no clock tells): each monitor pass asks the token table about
    /// the ones it owns. They are few (APNs declared their token dead, within the retention).
    var gone: Set<Int32> = []
    /// Activities the last monitor pass looked at (tests: a pass is proportional to what is due).
    var examinedInLastSweep = 0
    /// The partitions the last sweep was given (`nil`: all), if there was one.
    var lastOwned: Set<Int32>?
    var swept = false
    /// Activities the monitor has something to send for whose latest request is not in memory,
    /// in the order they fell due (the oldest first).
    var payloadsToRead: [ContentEngine.PayloadToRead] = []
    /// The starts the last pass found unconfirmed (``ContentEngine/takeUnconfirmedStarts()``): each
    /// is looked at again on every pass until its `startUnconfirmed` is on Kafka.
    var unconfirmedStarts: [ContentEngine.UnconfirmedStart] = []
    /// The activities whose memory changed since it was last written to the changelog
    /// (``ChangelogWriter``), by partition: of the partitions this instance owns
    /// (``own(_:)``; `nil`: of every partition).
    var unwritten = PartitionChanges<String>()
    /// The least timestamp of each partition this instance was assigned (``ContentTimestamps``):
    /// past what its previous owner can have stamped.
    var timestampFloors: [Int32: Int64] = [:]
    /// The key as the token table holds it, if it does: a new memory's key shares its storage.
    let heldKey: @Sendable (String) -> String?

    struct Slot {
        /// Empty when the slot is free.
        var key: String
        var memory: ActivityMemory
    }

    func memory(_ key: String) -> ActivityMemory? { index[key].map { slots[Int($0)].memory } }

    /// The keys of the memories of `activityId`, one per app that has it.
    func keys(ofActivity activityId: String) -> [String] {
        apps.keys.compactMap { bundleId in
            let key = MessageKey.activity(bundleId: bundleId, activityId: activityId)
            return index[key] == nil ? nil : key
        }
    }

    /// Every memory, with its key and slot.
    var all: some Sequence<(key: String, slot: Int32, memory: ActivityMemory)> {
        slots.lazy.enumerated().filter { !$0.element.key.isEmpty }.map { ($0.element.key, Int32($0.offset), $0.element.memory) }
    }

    mutating func unwritten(_ key: String, partition: Int32?) {
        unwritten.note(key, partition: partition)
    }

    /// Sets (or, with `nil`, forgets) the memory of `key`, keeping the index, the apps, the live
    /// and gone activities, the freshness classes, and the activity's deadline.
    /// - Parameter restored: read from the changelog (not to be written there again).
    mutating func set(_ key: String, _ memory: ActivityMemory?, now: Date, policy: FreshnessPolicy, restored: Bool = false) {
        let previous: ActivityMemory?
        let slot: Int32
        if let existing = index[key] {
            slot = existing
            previous = slots[Int(slot)].memory
        } else if memory != nil {
            // (Byte for byte: `==` on strings is canonical equivalence, and the key goes to Kafka.)
            let key = heldKey(key).flatMap { $0.utf8.elementsEqual(key.utf8) ? $0 : nil } ?? key
            if let free = freeSlots.popLast() {
                slot = free
                slots[Int(slot)].key = key
            } else {
                slot = Int32(slots.count)
                slots.append(Slot(key: key, memory: ActivityMemory()))
            }
            index[key] = slot
            apps[String(key.prefix { $0 != "/" }), default: 0] += 1
            previous = nil
        } else {
            return
        }
        if !restored { unwritten(key, partition: memory?.partition ?? previous?.partition) }
        changed(slot, memory, wasLive: previous?.isLive == true, wasGone: previous?.gone == true, now: now, policy: policy)
        if let memory {
            noteChannel(memory.channelId, previous: previous?.channelId, of: key)
            slots[Int(slot)].memory = memory
            if memory.steps != (previous?.steps ?? []) { queueSteps(memory.steps, of: slot, previous: previous?.steps ?? []) }
        } else {
            slots[Int(slot)] = Slot(key: "", memory: ActivityMemory())
            index[key] = nil
            freeSlots.append(slot)
            let bundleId = String(key.prefix { $0 != "/" })
            apps[bundleId, default: 1] -= 1
            if apps[bundleId] == 0 { apps[bundleId] = nil }
        }
    }

    /// Changes the memory of `key`, if remembered, in place, then as ``set(_:_:now:policy:restored:)``.
    mutating func update(_ key: String, now: Date, policy: FreshnessPolicy, _ change: (inout ActivityMemory) -> Void) {
        guard let slot = index[key] else { return }
        let (wasLive, wasGone) = (slots[Int(slot)].memory.isLive, slots[Int(slot)].memory.gone)
        let (steps, channel) = (slots[Int(slot)].memory.steps, slots[Int(slot)].memory.channelId)
        change(&slots[Int(slot)].memory)
        noteChannel(slots[Int(slot)].memory.channelId, previous: channel, of: key)
        if slots[Int(slot)].memory.steps != steps { queueSteps(slots[Int(slot)].memory.steps, of: slot, previous: steps) }
        unwritten(key, partition: slots[Int(slot)].memory.partition)
        changed(slot, slots[Int(slot)].memory, wasLive: wasLive, wasGone: wasGone, now: now, policy: policy)
    }

    /// The steps of the activity in `slot` that are new (not in `previous`) wait in the queue for their time.
    private mutating func queueSteps(_ current: [ActivityEvent], of slot: Int32, previous: [ActivityEvent]) {
        for step in current where !previous.contains(where: { $0.sequence == step.sequence && $0.at == step.at }) {
            steps.insert(step, slot: slot)
        }
        // Entries of superseded or moved steps wait for their time; should they outnumber the
        // steps kept, the queue is made again from the memories (amortised: it has doubled since).
        if steps.count > 2 * stepsAtRebuild + 1_024 {
            var queue = StepQueue()
            for (_, slot, memory) in all { for step in memory.steps { queue.insert(step, slot: slot) } }
            steps = queue
            stepsAtRebuild = queue.count
        }
    }

    private mutating func changed(_ slot: Int32, _ memory: ActivityMemory?, wasLive: Bool, wasGone: Bool, now: Date, policy: FreshnessPolicy) {
        liveCount += (memory?.isLive == true ? 1 : 0) - (wasLive ? 1 : 0)
        if memory?.gone == true { gone.insert(slot) } else if wasGone { gone.remove(slot) }
        look(at: slot, memory, now: now, policy: policy)
    }

    /// Brings the activity's freshness class up to date at `now`, and schedules it at its next deadline.
    mutating func look(at slot: Int32, _ memory: ActivityMemory?, now: Date, policy: FreshnessPolicy) {
        let class_ = memory?.freshness(now: now, policy: policy).flatMap { $0 == .fresh ? nil : $0 }
        let previous: Freshness?
        if let class_ { previous = notFresh.updateValue(class_, forKey: slot) } else { previous = notFresh.removeValue(forKey: slot) }
        if previous != class_ {
            if let previous { notFreshCounts[previous, default: 0] -= 1 }
            if let class_ { notFreshCounts[class_, default: 0] += 1 }
        }
        if let due = memory?.nextDeadline(now: now, policy: policy) { deadlines.schedule(slot, at: due, now: now) } else { deadlines.cancel(slot) }
    }

    /// Looks at the activities due at `now` (their class may have changed by time) without
    /// acting: those with something to do stay due for the monitor.
    mutating func catchUp(now: Date, policy: FreshnessPolicy) {
        for slot in deadlines.popDue(now: now) where !slots[Int(slot)].key.isEmpty {
            look(at: slot, slots[Int(slot)].memory, now: now, policy: policy)
        }
    }

    // MARK: The freshness monitor's pass

    /// Whether `memory`'s partition is among those owned (`nil`: all are).
    static func isOwned(_ memory: ActivityMemory, by owned: Set<Int32>?) -> Bool {
        owned.map { owned in memory.partition.map(owned.contains) ?? false } ?? true
    }

    /// The app registered a token after APNs's verdict (a new one, or the same again): the
    /// activity is watched again (and, stale, refreshed in this pass: it is due at once).
    mutating func revive(owned: Set<Int32>?, now: Date, policy: FreshnessPolicy, registeredAgain: (String, ActivityMemory) -> Bool) {
        var revived: [(String, ActivityMemory)] = []
        for slot in gone {
            let (activityKey, memory) = (slots[Int(slot)].key, slots[Int(slot)].memory)
            guard memory.latest != nil, Self.isOwned(memory, by: owned), registeredAgain(activityKey, memory) else { continue }
            var alive = memory
            alive.gone = false
            revived.append((activityKey, alive))
        }
        for (activityKey, memory) in revived { set(activityKey, memory, now: now, policy: policy) }
    }

    /// Partitions newly owned: their live activities are looked at now (the others had put them
    /// off a minute at a time).
    mutating func scheduleNewlyOwned(_ owned: Set<Int32>?, now: Date) {
        if swept, let last = lastOwned, owned.map({ !$0.isSubset(of: last) }) ?? true {
            var newlyOwned: [Int32] = []
            for (_, slot, memory) in all where memory.isLive {
                if Self.isOwned(memory, by: owned), !(memory.partition.map(last.contains) ?? false) { newlyOwned.append(slot) }
            }
            for slot in newlyOwned { deadlines.schedule(slot, at: now, now: now) }
        }
        lastOwned = owned
        swept = true
    }

    /// Drops the push-to-start owners of forgotten activities, once they are many.
    mutating func pruneStartOwners() {
        if startOwners.count + startRequests.count + channelOwners.count > max(index.count, 2 * startOwnersPruned) { dropForgottenStartOwners() }
    }
}
