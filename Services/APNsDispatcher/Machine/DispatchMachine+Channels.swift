import Foundation
import HeapModule
import IsletMessages
import Logging
import NIOCore

/// Broadcasts (iOS 18): a request with `channelStoragePolicy` goes to its activity's channel, one
/// push for every phone subscribed. The channel is made with APNs on the activity's first
/// broadcast (its record persisted before anything is sent on it), reused from then on (a
/// partition's next owner reads the records: it never makes a second channel for an activity),
/// and deleted ``DispatcherPolicy/channelDeletionDelay`` after the activity's `end` was delivered.
extension DispatchMachine {
    /// A channel to make for an activity's broadcasts.
    struct ChannelCreation: Sendable, Equatable {
        var key: String
        var app: AppTarget
        var activityId: String
        var storagePolicy: Int
        var team: String
        /// When it is deleted if its activity's end never comes (or is never delivered): an
        /// activity lives 8 hours, then the deletion delay.
        var deleteAt: Date
    }

    /// What stops a broadcast or lets it go: its team, its bounds, its channel (made first if the
    /// activity has none), the team's lane.
    mutating func checkBroadcast(_ head: QueuedRequest, key: String) -> Check {
        let request = head.request
        if uncovered.contains(request.app) {
            return drop(head, key: key, .rejected, Self.uncoveredDetail(request.app))
        }
        guard teams[request.app.bundleId] != nil, let team = lane(for: request.app) else {
            return drop(head, key: key, .rejected, "no APNs signing key is configured for \(request.app.bundleId)")
        }
        if let expiration = request.expiration, expiration < now {
            return drop(head, key: key, .expired, "apns-expiration passed before it could be sent")
        }
        // Ended (also before a restart, which the slot does not survive): nothing more, and no new
        // channel; but the end again, while the channel is there (content-service sends it when a
        // phone's push-to-start on the channel reached it after the end was made).
        if let ended = channels[key], ended.endedAt != nil, request.event != .end || ended.deletedAt != nil {
            return drop(head, key: key, .expired, "the activity has ended: nothing is sent after its end")
        }
        if let channel = channels[key], channel.app.environment != request.app.environment {
            return drop(head, key: key, .rejected, "the activity's broadcast channel is in \(channel.app.environment.rawValue): a channel never crosses environments")
        }
        // An end with no channel (never made, or gone; not one being made): no phone is on one to end.
        if request.event == .end, !creatingChannels.contains(key), channels[key].map({ $0.deletedAt != nil }) ?? true {
            return drop(head, key: key, .expired, "the activity has no broadcast channel: no phone is on it to end")
        }
        guard let channel = channels[key], channel.deletedAt == nil else {
            // Looked at again when the channel is made (or its making failed).
            if creatingChannels.insert(key).inserted, let activityId = request.activityId {
                actions.append(
                    .createChannel(
                        ChannelCreation(
                            key: key, app: request.app, activityId: activityId, storagePolicy: request.channelStoragePolicy ?? 0, team: team,
                            deleteAt: now.addingTimeInterval((policy.activityLifetime + policy.channelDeletionDelay) / .seconds(1)))))
            }
            return .held
        }
        return holdForLane(head, key: key, team: team) ?? .ready(.channel(channel), team: team)
    }

    /// One send of a broadcast: to the channel, with `apns-expiration` 0 on a channel that stores
    /// no message (APNs refuses any other there).
    func broadcast(
        _ entry: QueuedRequest, key: String, channel: BroadcastChannelRecord, team: String, priority: Int, downgraded: Bool, announces: Bool = false
    ) -> Attempt {
        let request = entry.request
        let payload = entry.ambiguous && request.alerting ? DispatchEngine.withoutAlert(request.payload) : request.payload
        let expiration = channel.storagePolicy == 0 ? 0 : request.expiration.map { Int64($0.timeIntervalSince1970) } ?? 0
        let push = APNsPush(
            destination: .channel(id: channel.channelId, bundleID: channel.app.bundleId), priority: priority, apnsID: request.requestId,
            expiration: expiration, payload: ByteBuffer(string: payload))
        // A broadcast with an alert is announced like a push: sent again (a crash, a partition
        // moved), it goes without its alert to every phone on the channel.
        let announcement: PushOutcome? =
            announces
            ? PushOutcome(
                requestId: request.requestId, activityId: request.activityId, result: .sending, attempts: entry.attempts,
                detail: "a broadcast with an alert about to be sent", completedAt: now, bundleId: request.app.bundleId,
                attributesType: request.attributesType, channelId: channel.channelId, contentSequence: request.contentSequence,
                announcementId: entry.announcementId, apnsTimestamp: request.apnsTimestamp)
            : nil
        return Attempt(
            entry: entry, key: key, team: team, push: push, environment: channel.app.environment, fingerprint: nil, registeredAt: nil,
            channelId: channel.channelId, priority: priority, downgraded: downgraded, announcement: announcement)
    }

    // MARK: Inputs

    /// A channel record read from `islet.broadcast-channels.v1` (a partition assigned): the
    /// activity's channel is this one; one ended and not yet deleted is deleted when due.
    mutating func channelRecorded(_ record: BroadcastChannelRecord, now: Date) -> [Action] {
        self.now = now
        guard let key = record.key else { return [] }
        if let known = channels[key] {
            // Our own newer record of the channel (written after this one was read) stands; so does
            // a newer channel: this record is of an older one (read back after it was replaced,
            // or written late by an owner the partition left while it made it).
            if known.channelId == record.channelId ? known.writtenAt > record.writtenAt : known.createdAt > record.createdAt { return [] }
        }
        channels[key] = record
        scheduleDeletion(key, record)
        pump(key)
        return takeActions()
    }

    /// APNs made the channel and its record is persisted: the activity's broadcasts go.
    mutating func channelCreated(_ record: BroadcastChannelRecord, now: Date) -> [Action] {
        self.now = now
        guard let key = record.key else { return [] }
        creatingChannels.remove(key)
        channels[key] = record
        slots[key]?.channelAttempts = nil
        scheduleDeletion(key, record)
        logger.info(
            "broadcast channel made", metadata: ["activity.key": "\(key)", "apns.channel": "\(record.channelId)", "apns.storagePolicy": "\(record.storagePolicy)"])
        pump(key)
        return takeActions()
    }

    /// APNs did not make the channel. `retryable` (no answer, 429, 5xx): its broadcasts wait and
    /// the next look tries again, within each request's bounds; otherwise (APNs refused: the app
    /// lacks the capability, 10,000 channels already) the waiting broadcasts are rejected.
    mutating func channelNotCreated(_ key: String, retryable: Bool, detail: String, now: Date) -> [Action] {
        self.now = now
        creatingChannels.remove(key)
        guard var slot = slots[key] else { return takeActions() }
        logger.warning("broadcast channel not made", metadata: ["activity.key": "\(key)", "error": "\(detail)", "retryable": "\(retryable)"])
        if retryable {
            let attempts = (slot.channelAttempts ?? 0) + 1
            slot.channelAttempts = attempts
            let waiting = slot.queue.removeAll { entry in
                policy.retry.deadline(expiration: entry.request.expiration, firstAttempt: entry.enqueuedAt) <= now || attempts >= policy.retry.maximumAttempts
            }
            let delay = policy.retry.delay(afterAttempts: attempts, random: random())
            slot.notBefore = now.addingTimeInterval(delay / .seconds(1))
            slots[key] = slot
            queued -= waiting.count
            for entry in waiting { finish(entry, .failed, detail: "no broadcast channel could be made: \(detail)") }
            if !slot.queue.isEmpty { wake(key, at: slot.notBefore!) }
        } else {
            let waiting = slot.queue.removeAll { _ in true }
            slot.channelAttempts = nil
            slots[key] = slot
            queued -= waiting.count
            for entry in waiting { finish(entry, .rejected, detail: "APNs made no broadcast channel: \(detail)") }
        }
        return takeActions()
    }

    /// The channel is deleted (or was gone already), and the record saying so persisted.
    mutating func channelDeleted(_ record: BroadcastChannelRecord, now: Date) -> [Action] {
        self.now = now
        guard let key = record.key else { return [] }
        deletingChannels.remove(key)
        channels[key] = record
        return takeActions()
    }

    /// Deleting the channel failed: tried again in 5 minutes.
    mutating func channelNotDeleted(_ key: String, now: Date) -> [Action] {
        self.now = now
        deletingChannels.remove(key)
        channelDeletions.insert(Wakeup(at: now.addingTimeInterval(300), key: key))
        return takeActions()
    }

    // MARK: Inside

    /// A broadcast `end` was delivered: the channel is deleted after the delay (unless it was due
    /// earlier: every channel is deleted at the latest an activity's lifetime and the delay after
    /// it was made), and the record says when.
    mutating func broadcastEnded(_ key: String) {
        guard var channel = channels[key], channel.deletedAt == nil, channel.endedAt == nil else { return }
        channel.endedAt = now
        channel.deleteAt = min(channel.deleteAt ?? .distantFuture, now.addingTimeInterval(policy.channelDeletionDelay / .seconds(1)))
        channel.writtenAt = now
        channels[key] = channel
        actions.append(.recordChannel(channel))
        scheduleDeletion(key, channel)
    }

    /// APNs said the channel is not there (deleted elsewhere, or never this app's): it is
    /// recorded as deleted, and the activity's next broadcast makes a new one.
    mutating func channelGone(_ key: String, channelId: String?, reason: String) {
        guard var channel = channels[key], channel.channelId == channelId, channel.deletedAt == nil else { return }
        logger.error(
            "APNs does not know the activity's broadcast channel: its next broadcast makes a new one (phones on the old one get nothing)",
            metadata: ["activity.key": "\(key)", "apns.channel": "\(channel.channelId)", "apns.reason": "\(reason)"])
        channel.deletedAt = now
        channel.writtenAt = now
        channels[key] = channel
        actions.append(.recordChannel(channel))
    }

    private mutating func scheduleDeletion(_ key: String, _ record: BroadcastChannelRecord) {
        guard record.deletedAt == nil, let at = record.deleteAt else { return }
        channelDeletions.insert(Wakeup(at: at, key: key))
    }

    /// Deletes the channels whose time came (unless a broadcast is still in flight or waits).
    mutating func deleteChannelsDue() {
        while let next = channelDeletions.min, next.at <= now {
            let key = channelDeletions.removeMin().key
            guard let channel = channels[key], channel.deletedAt == nil, let deleteAt = channel.deleteAt, deleteAt <= now,
                !deletingChannels.contains(key)
            else { continue }
            guard let team = lane(for: channel.app) else {
                // No key signs for its app and environment any more (a scoped key removed): kept,
                // and tried again in an hour, said loudly.
                logger.warning(
                    "a broadcast channel due for deletion has no signing key for its app and environment: tried again in an hour",
                    metadata: ["activity.key": "\(key)", "channel.id": "\(channel.channelId)", "app.environment": "\(channel.app.environment.rawValue)"])
                channelDeletions.insert(Wakeup(at: now.addingTimeInterval(3_600), key: key))
                continue
            }
            if let slot = slots[key], slot.inFlight != nil || !slot.queue.isEmpty {
                channelDeletions.insert(Wakeup(at: now.addingTimeInterval(60), key: key))
                continue
            }
            deletingChannels.insert(key)
            actions.append(.deleteChannel(channel, team: team))
        }
    }
}
