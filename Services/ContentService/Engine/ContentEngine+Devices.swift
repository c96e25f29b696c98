import Foundation
import IsletMessages
import IsletTokens
import Synchronization

/// An activity on several devices (token-registry keeps one update token per device): every
/// request for the activity's own token gets a copy for each of its other devices' active tokens
/// (``PushRequest/deviceId``), written with it to the same partition. The dispatcher queues,
/// budgets and coalesces each device's copies under that device's key, and a 410 ends that
/// device's token alone. The activity's memory and freshness follow its own request: copies are
/// not replayed into it and their outcomes are not its outcomes.
extension ContentEngine {
    /// One of an activity's other devices, as its copies are made for it.
    struct DeviceToken: Equatable, Sendable {
        /// `<bundleId>/<activityId>/<deviceId>`.
        var key: String
        var deviceId: String
        var token: DeliveryToken
    }

    /// The activity's other devices with an active token, by device; one per token (a token the
    /// activity's own record, or an earlier device's, holds too is that phone's already); only its
    /// owner's (the user of its own record): a record another user slipped in — before a claim by
    /// the ticketed owner was read everywhere — gets nothing of the activity.
    func deviceTokens(of activityKey: String) -> [DeviceToken] {
        let keys = tokens.deviceKeys(ofActivity: activityKey)
        guard !keys.isEmpty else { return [] }
        let own = tokens.token(forKey: activityKey)
        var seen: Set<String> = own.map { [$0.fingerprint] } ?? []
        return keys.compactMap { key in
            guard let (_, deviceId) = MessageKey.splitDevice(key), let token = tokens.token(forKey: key), token.state == .active,
                own.map({ $0.owner == token.owner }) ?? true, seen.insert(token.fingerprint).inserted
            else { return nil }
            return DeviceToken(key: key, deviceId: deviceId, token: token)
        }
    }

    /// `requests`, each preceded by its copies for the activity's other devices (written first: a
    /// writer that dies between them leaves the activity's own request unwritten, and the event,
    /// read again, makes both again — the copies' ids too, which the dispatcher takes once; but a
    /// copy Kafka refuses while it takes the request after it is not made again: seed 19734, whose
    /// end the next owner sends, ``devicesOfRecentEnds(_:owned:now:)``). A
    /// device whose app version or language differs from the token the requests were made for gets
    /// its content assembled for its own (from the same memory, so the same ids, sequence and
    /// timestamps); one its version cannot show (the template refuses it) gets no copy of this
    /// event's update, and its end as made for the first device.
    func withDeviceCopies(
        _ requests: [PushRequest], event: ActivityEvent, _ inputs: AssemblyInputs, images: [String: [String]], now: Date
    ) -> [PushRequest] {
        guard !inputs.devices.isEmpty, requests.contains(where: Self.isCopied) else { return requests }
        var rendered: [Profile: [PushRequest]] = [Profile(inputs.record): requests]
        var copies: [[PushRequest]] = Array(repeating: [], count: requests.count)
        for device in inputs.devices {
            let profile = Profile(device.token)
            if rendered[profile] == nil {
                var scratch = inputs.memory
                let version = AppVersion(device.token.appVersion) ?? Self.newest
                let made = try? assembler.assemble(
                    event, app: inputs.app, appVersion: version, locale: device.token.locale, memory: &scratch, now: now, images: images,
                    timestampFloor: inputs.floor, tokenRegisteredAt: nil)
                rendered[profile] = made.map { made in requests.compactMap { request in made.requests.first { $0.requestId == request.requestId } } } ?? []
            }
            let own = rendered[profile] ?? []
            for (index, request) in requests.enumerated() where Self.isCopied(request) {
                guard let payload = own.first(where: { $0.requestId == request.requestId })?.payload ?? (request.event == .end ? request.payload : nil)
                else { continue }
                copies[index].append(Self.copy(of: request, for: device, payload: payload))
            }
        }
        return zip(requests, copies).flatMap { $1 + [$0] }
    }

    /// `requests`, each preceded by its copies for `devices`, with the same payload (the
    /// freshness monitor's end, made from the activity's latest request).
    func withDeviceCopies(_ requests: [PushRequest], devices: [DeviceToken]) -> [PushRequest] {
        requests.flatMap { request in
            Self.isCopied(request) ? devices.map { Self.copy(of: request, for: $0, payload: request.payload) } + [request] : [request]
        }
    }

    /// A request for the activity's own token (not a broadcast, not a push-to-start, not a copy).
    static func isCopied(_ request: PushRequest) -> Bool {
        request.activityId != nil && !request.isBroadcast && !request.isDeviceCopy
    }

    /// - Parameter requestId: the copy's id (by default derived from the request's, ``RequestIds/copy(of:deviceId:)``).
    static func copy(of request: PushRequest, for device: DeviceToken, payload: String, requestId: String? = nil) -> PushRequest {
        var copy = request
        copy.requestId = requestId ?? RequestIds.copy(of: request.requestId, deviceId: device.deviceId)
        copy.deviceId = device.deviceId
        copy.payload = payload
        copy.tokenRegisteredAt = device.token.registeredAt
        return copy
    }

    /// What a payload is rendered for: the app version and language.
    struct Profile: Hashable {
        var appVersion: String?
        var locale: String?

        init(_ token: DeliveryToken?) {
            appVersion = token?.appVersion
            locale = token?.locale
        }
    }
}

/// A device whose record the table read after the activity's latest content was made (it
/// registered late, or this instance's replica lagged) got no copy of it: the freshness monitor's
/// pass sends it one — the latest content of the activity as the monitor re-sends it (a new stale
/// date, no alert), or the end of an ended one when the activity started on the device (as the app
/// reported it; else when it registered) before that end was made (one started after it is a new
/// activity of the same id). Only records that are new, carry a new token or became active are
/// noted, and only once the table was loaded (``watchLateDevices()``): a confirmation, or the load
/// at start-up, sends nothing again.
extension ContentEngine {
    /// Device records read, by key, and when (the table's observer writes, the monitor's pass reads).
    final class LateDevices: Sendable {
        struct State {
            var watching = false
            /// Device keys whose record is active → its token's fingerprint (only those: few).
            var known: [String: String] = [:]
            /// Device keys to look at → when their record was read.
            var late: [String: Date] = [:]
            /// Partitions this instance owned at the last assignment (``ContentEngine/trackChanges(of:)``).
            var owned: Set<Int32> = []
            /// Activities of partitions newly owned that ended recently → when noted: their
            /// devices are looked at once the table is loaded (``ContentEngine/devicesOfRecentEnds(_:now:)``).
            var recentEnds: [String: Date] = [:]
            /// Ended activities whose push-to-start reached a device after the end was made → those
            /// devices, and when the first was noted (``ContentEngine/endsOwed(in:owned:now:prepared:)``).
            var owedEnds: [String: (devices: Set<String>, since: Date)] = [:]
        }

        let state = Mutex(State())

        /// The push-to-start of `activityKey` reached `deviceId` after the activity's end was made.
        func owe(_ activityKey: String, deviceId: String, at date: Date) {
            state.withLock { state in
                guard state.owedEnds.count < ContentEngine.maximumLateDevices || state.owedEnds[activityKey] != nil else { return }
                state.owedEnds[activityKey, default: ([], date)].devices.insert(deviceId)
            }
        }

        /// A device's record applied to the table (`token` as it is now).
        func applied(_ key: String, token: DeliveryToken?, at date: Date) {
            state.withLock { state in
                guard let token, token.state == .active else {
                    state.known[key] = nil
                    return
                }
                let fingerprint = token.fingerprint
                // New, rotated, or active again: the activity's latest content may have missed it.
                guard state.known.updateValue(fingerprint, forKey: key) != fingerprint, state.watching else { return }
                if state.late.count < ContentEngine.maximumLateDevices { state.late[key] = date }
            }
        }
    }

    /// From now on, a device's record the table reads is a device that may have missed the
    /// activity's latest content (call once the token table's first load is complete).
    public func watchLateDevices() {
        lateDevices.state.withLock { $0.watching = true }
    }

    /// The most device records waiting for that look at once (a burst beyond is left to the next event).
    static let maximumLateDevices = 100_000
    /// How long a device record waits for its activity to be owned here, or known.
    static let lateDeviceWait: TimeInterval = 600

    /// How long after its end an activity's devices are looked at by an instance its partition
    /// goes to (``devicesOfRecentEnds(_:now:)``).
    static let recentEndWindow: TimeInterval = 3_600

    /// Partitions newly owned (gained from another instance, or at start-up): the devices of their
    /// activities that ended within ``recentEndWindow`` are looked at by the next pass as if their
    /// records had been read now, so that each device whose activity started before the end gets
    /// the end. The instance that made the end may have left a device without its copy and stopped
    /// before its pass caught it up: its token replica lagged behind the device's registration
    /// (seed 6336), or Kafka refused the copy and took the end after it (seed 19734); this
    /// instance's own table may have read that device before the end, and its memory has the end
    /// (the event is not made again). A device that got the end gets it a second time (the
    /// catch-up's own request id), which the phone ignores: its activity has ended.
    func devicesOfRecentEnds(_ state: inout ActivityMemories, owned partitions: Set<Int32>, now: Date) {
        let gained = lateDevices.state.withLock { late in
            defer { late.owned = partitions }
            return partitions.subtracting(late.owned)
        }
        guard !gained.isEmpty else { return }
        var ended: [String] = []
        var channelsEnded: [String] = []
        for (key, _, memory) in state.all where memory.ended {
            guard let partition = memory.partition, gained.contains(partition), let latest = memory.latest,
                now.timeIntervalSince(latest.createdAt) <= Self.recentEndWindow
            else { continue }
            if assembler.templates[latest.attributesType]?.broadcastStoragePolicy != nil {
                // A phone's start on its channel may have reached it after the end while the
                // instance that made the end stopped before it sent the end again (what it owed
                // is not in the changelog, and that start's outcome may lie before the checkpoint):
                // the end once more, to the channel, soon after the end.
                if memory.channelId != nil, now.timeIntervalSince(latest.createdAt) <= Self.lateDeviceWait { channelsEnded.append(key) }
            } else {
                ended.append(key)
            }
        }
        guard !ended.isEmpty || !channelsEnded.isEmpty else { return }
        lateDevices.state.withLock { late in
            for key in ended where late.recentEnds.count < Self.maximumLateDevices { late.recentEnds[key] = now }
        }
        // (Named by the gain's time: a second gain makes a new request, which the dispatcher takes.)
        let gain = "partition-gained@\(Int64((now.timeIntervalSince1970 * 1_000).rounded()))"
        for key in channelsEnded { lateDevices.owe(key, deviceId: gain, at: now) }
    }

    /// Ends owed to devices an activity's push-to-start reached after its end was made (the start
    /// waited minutes behind a dispatcher that could not read its outcomes, say, while the end
    /// found no token, or no record of that device: seeds 24440 and 68): the end again, for the
    /// activity's own token (whichever device registered first) and as a copy for the device's
    /// record, each under an id derived from the end's and the device's (made once: the dispatcher
    /// takes an id once). Each waits in the dispatcher for its token, which the app registers once
    /// iOS started the activity. The devices are known from the start's outcomes: the activity on
    /// them is this one, whenever its token is registered. Returned as ``catchUpDevices`` returns
    /// its copies, changing no memory.
    func endsOwed(in state: inout ActivityMemories, owned: Set<Int32>?, now: Date, prepared: inout [Prepared]) {
        let owed = lateDevices.state.withLock { $0.owedEnds }
        guard !owed.isEmpty else { return }
        var settled: [String] = []
        var made: [String: [PushRequest]] = [:]
        for (activityKey, entry) in owed.sorted(by: { $0.key < $1.key }) {
            guard now.timeIntervalSince(entry.since) <= Self.lateDeviceWait, let memory = state.memory(activityKey), memory.ended else {
                settled.append(activityKey)
                continue
            }
            // Another instance's: looked at again (the partition may come here).
            guard ActivityMemories.isOwned(memory, by: owned) else { continue }
            guard let full = Self.latestInFull(memory, of: activityKey, in: &state) else {
                if memory.payloadToRead == nil { settled.append(activityKey) }
                continue
            }
            settled.append(activityKey)
            // An activity sent by broadcast: a phone's start on its channel reached it after the
            // end was made. The end again, to the channel (every other phone there has ended and
            // ignores it), under an id derived from the end's and those devices' (a set made again
            // after a restart, with one more device, is a new request: the dispatcher would take
            // the same id once).
            if full.event == .end, full.isBroadcast {
                // (Not when APNs said the channel is gone: the dispatcher would make a new one.)
                guard memory.channelId != nil else { continue }
                made[activityKey] = [
                    assembler.followUp(
                        .end(.clientEnded), of: full, requestId: RequestIds.catchUp(of: full.requestId, deviceId: entry.devices.sorted().joined(separator: ",")),
                        timestamp: full.apnsTimestamp, now: now)
                ].compactMap { $0 }
                continue
            }
            guard full.event == .end, Self.isCopied(full) else { continue }
            func end(to deviceId: String?) -> PushRequest? {
                guard var end = assembler.followUp(
                    .end(.clientEnded), of: full, requestId: RequestIds.catchUp(of: full.requestId, deviceId: deviceId ?? ""),
                    timestamp: full.apnsTimestamp, now: now)
                else { return nil }
                end.deviceId = deviceId
                end.tokenRegisteredAt = nil
                return end
            }
            made[activityKey] = entry.devices.sorted().compactMap { end(to: $0) } + [end(to: nil)].compactMap { $0 }
        }
        lateDevices.state.withLock { late in
            for key in settled where late.owedEnds[key]?.since == owed[key]?.since && late.owedEnds[key]?.devices == owed[key]?.devices {
                late.owedEnds[key] = nil
            }
        }
        Self.merge(made, into: &prepared)
    }

    /// The memory's latest request in full; `nil` when it is not in memory, its read from Kafka
    /// then asked of the pass's caller (``ActivityMemories/payloadsToRead``) when it can be read.
    static func latestInFull(_ memory: ActivityMemory, of activityKey: String, in state: inout ActivityMemories) -> PushRequest? {
        if let full = memory.latestRequest { return full }
        if let position = memory.payloadToRead, let latest = memory.latest, !state.payloadsToRead.contains(where: { $0.activityKey == activityKey }) {
            state.payloadsToRead.append(PayloadToRead(activityKey: activityKey, position: position, requestId: latest.requestId))
        }
        return nil
    }

    /// Requests the pass makes by activity, changing no memory, put before the pass's other work
    /// for the same activity (or on their own).
    static func merge(_ made: [String: [PushRequest]], into prepared: inout [Prepared]) {
        for (activityKey, requests) in made.sorted(by: { $0.key < $1.key }) where !requests.isEmpty {
            if let index = prepared.firstIndex(where: { $0.activityKey == activityKey }) {
                prepared[index].requests = requests + prepared[index].requests
            } else {
                prepared.append(Prepared(requests: requests, shrinks: [], activityKey: activityKey, memory: nil))
            }
        }
    }

    /// The copies the pass sends to devices registered late, by activity. `prepared` (the pass's
    /// other work) gets those of its activities; the others are returned, changing no memory.
    func catchUpDevices(in state: inout ActivityMemories, owned: Set<Int32>?, now: Date, prepared: inout [Prepared]) {
        // Recently ended activities of partitions gained: their devices, once the table is loaded.
        let tokens = self.tokens
        let pending = lateDevices.state.withLock { late in
            if late.watching, !late.recentEnds.isEmpty {
                for activityKey in late.recentEnds.keys {
                    // Read "now" also when the device waits already: its record may have been read
                    // before the end was made (while another instance owned the activity).
                    for key in tokens.deviceKeys(ofActivity: activityKey) where late.late[key] != nil || late.late.count < Self.maximumLateDevices {
                        late.late[key] = now
                    }
                }
                late.recentEnds = [:]
            }
            return late.late
        }
        guard !pending.isEmpty else { return }
        var settled: [String] = []
        var copies: [String: [PushRequest]] = [:]
        for (key, readAt) in pending.sorted(by: { $0.key < $1.key }) {
            guard let (activityKey, _) = MessageKey.splitDevice(key), now.timeIntervalSince(readAt) <= Self.lateDeviceWait else {
                settled.append(key)
                continue
            }
            // Not known here, or another instance's: looked at again (the partition may come here).
            guard let memory = state.memory(activityKey), let latest = memory.latest, ActivityMemories.isOwned(memory, by: owned) else { continue }
            // Only the owner's devices, one per token. (The content as made for the first device:
            // its version and language; the next event's copy is made for this one's.)
            guard let device = deviceTokens(of: activityKey).first(where: { $0.key == key }), latest.createdAt < readAt, !memory.ended || (device.token.activityStartedAt ?? device.token.registeredAt) <= latest.createdAt
            else {
                settled.append(key)
                continue
            }
            guard let full = Self.latestInFull(memory, of: activityKey, in: &state) else {
                if memory.payloadToRead == nil { settled.append(key) }
                continue
            }
            settled.append(key)
            guard Self.isCopied(full),
                let again = assembler.followUp(
                    memory.ended ? .end(.clientEnded) : .resend, of: full, requestId: RequestIds.catchUp(of: full.requestId, deviceId: device.deviceId),
                    timestamp: full.apnsTimestamp, now: now)
            else { continue }
            copies[activityKey, default: []].append(Self.copy(of: again, for: device, payload: again.payload, requestId: again.requestId))
        }
        lateDevices.state.withLock { lateState in for key in settled where lateState.late[key] == pending[key] { lateState.late[key] = nil } }
        Self.merge(copies, into: &prepared)
    }
}
