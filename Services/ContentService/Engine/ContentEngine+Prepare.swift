import Foundation
import IsletMessages
import IsletTokens
import Synchronization

/// What an event becomes: its inputs read (the activity's memory, its token, the partition's
/// timestamp floor), then its requests assembled from the event and those inputs.
///
/// Assembly is a pure function of the event, the inputs, the clock and the images. An event a
/// backend hands this instance (``EventIntake``) is assembled when it is checked, before it is
/// published (``prepareAhead(_:partition:)``), and kept a few seconds (``AssembledAhead``): when
/// the loop reads it back and its inputs are still the same, that assembly is the one used. When
/// anything it read has changed since (another event or an outcome of the activity, a token
/// rotated, a re-send, the partition's floor, images to inline), it is assembled again from what
/// is true now, as every event read from Kafka is.
extension ContentEngine {
    /// The version assembled for when the activity's app version is not known (``AppVersion/unknown``).
    static let newest = AppVersion.unknown

    /// - Parameter partition: the partition the event was read from (its activity's partition).
    /// - Parameter images: thumbnails by image URL (``ThumbnailService``); without, images go by URL only.
    /// - Parameter firing: the event is a scheduled step whose time has come (``dueSteps(owned:)``).
    public func prepare(_ event: ActivityEvent, partition: Int32? = nil, images: [String: [String]] = [:], firing: Bool = false) throws(ContentError) -> Decision {
        let (event, startDevices) = resolvingUser(event)
        let preparation = try inputs(of: event, partition: partition, startDevices: startDevices)
        let now = clock.date
        if !firing, Self.isForLater(event, now: now) { return try schedule(event, preparation, now: now) }
        let window = assembler.policy.alertWindow / .seconds(1)
        if let ahead = assembledAhead.take(event, inputs: preparation.inputs, withImages: !images.isEmpty, now: now, alertWindow: window) {
            if checksAssembledAhead { try check(ahead, of: event, preparation) }
            return ahead.decision
        }
        return try assemble(event, preparation, images: images, now: now)
    }

    /// As ``prepare(_:partition:images:)``, for an event about to be published (``EventIntake``):
    /// with `keep`, its decision is kept for when the event is read back, and used then if its
    /// inputs have not changed (``AssembledAhead``).
    /// - Parameter partition: the partition the event will be in (`nil` when not known yet).
    /// - Parameter keep: this instance owns that partition (it will read the event back).
    public func prepareAhead(_ event: ActivityEvent, partition: Int32?, keep: Bool = true) throws(ContentError) -> Decision {
        let (event, startDevices) = resolvingUser(event)
        let preparation = try inputs(of: event, partition: partition, startDevices: startDevices)
        let now = clock.date
        if Self.isForLater(event, now: now) { return try schedule(event, preparation, now: now) }
        let decision = try assemble(event, preparation, images: [:], now: now)
        if keep { assembledAhead.keep(event, inputs: preparation.inputs, decision: decision, at: now) }
        return decision
    }

    /// Assembled again as it was at the check: the same requests and memory, or the assembly is
    /// not the pure function of its inputs it must be to be used again (the simulator checks
    /// every use so; counted in ``assembledAheadMismatches``).
    private func check(_ ahead: (decision: Decision, at: Date), of event: ActivityEvent, _ preparation: Preparation) throws(ContentError) {
        let again = try assemble(event, preparation, images: [:], now: ahead.at)
        switch (ahead.decision, again) {
        case (.send(let kept), .send(let made)) where kept.requests == made.requests && kept.memory == made.memory: return
        case (.ignore(let kept), .ignore(let made)) where kept == made: return
        default: assembledAheadMismatches.add(1, ordering: .relaxed)
        }
    }

    /// Events sent as assembled at their check (``prepareAhead(_:partition:keep:)``), since the start.
    public var eventsAssembledOnce: Int { assembledAhead.used }

    /// Uses of a kept assembly that assembling again at the check's time did not reproduce
    /// (with `checksAssembledAhead`): must stay 0.
    public var assembledAheadMismatchCount: Int { assembledAheadMismatches.load(ordering: .relaxed) }

    /// What assembly reads besides the event, the clock and the images: all of it, so that two
    /// equal values assemble an event to the same requests.
    struct AssemblyInputs: Equatable, Sendable {
        /// The activity, of its app (`<bundleId>/<activityId>`).
        var activityKey: String
        /// Its memory, with the event's partition.
        var memory: ActivityMemory
        /// The token the content is made for (its app version and locale), if known.
        var record: DeliveryToken?
        var app: AppTarget
        /// The partition's timestamp floor.
        var floor: Int64?
        /// The registration of the request key's own token.
        var registeredAt: Date?
        /// The activity's other devices' active tokens (``withDeviceCopies(_:event:_:images:now:)``).
        var devices: [DeviceToken] = []
        /// A start to every device of a user: the devices after the first (``withStartCopies(_:event:_:images:now:)``).
        var startDevices: [StartDevice] = []
        /// The user's devices whose widgets the event may refresh (``withWidgetPushes(_:template:_:now:)``).
        var widgets: [WidgetTarget] = []
    }

    /// An event's inputs, and what follows from them alone.
    struct Preparation {
        var template: ActivityTemplate
        var inputs: AssemblyInputs
        /// The update of an end written in part, not to be sent again (``endWrittenInPart(_:activityKey:memory:)``).
        var writtenInPart: String?
        /// Why the event is not applied, if it is not.
        var ignored: String?
    }

    /// Reads what the event's assembly needs; throws what is wrong with the event before assembly.
    func inputs(of event: ActivityEvent, partition: Int32?, startDevices: [StartDevice] = []) throws(ContentError) -> Preparation {
        guard let template = assembler.templates[event.attributesType] else {
            throw ContentError(field: "attributesType", problem: "\(event.attributesType) has no template")
        }
        let activityKey = try activityKey(of: event)
        var memory = state.withLock { $0.memory(activityKey) } ?? ActivityMemory()
        if let partition { memory.partition = partition }
        // An event that is not applied is still checked: a caller (gRPC) learns that it is invalid.
        let writtenInPart = Self.endWrittenInPart(event, activityKey: activityKey, memory: memory)
        // A start of an activity sent by broadcast on one more phone (its channel's) is never
        // the activity's sequence: the assembly checks it against the activity's memory.
        let joins = template.broadcastStoragePolicy != nil && event.kind == .start && event.startTarget != nil
        let ignored = joins ? nil : try Self.whyIgnored(event, memory: memory, endWrittenInPart: writtenInPart != nil)
        let (key, record, app) = try target(of: event, activityKey: activityKey, template: template, memory: memory, ignored: ignored != nil)
        let floor = memory.partition.flatMap { partition in state.withLock { $0.timestampFloors[partition] } }
        // The registration the content is made for, when it is the request's own key's (not the
        // push-to-start token standing in for the activity's own, not yet read).
        let registeredAt = template.broadcastStoragePolicy == nil || joins ? tokens.token(forKey: key).map(\.registeredAt) : nil
        let devices = template.broadcastStoragePolicy == nil && event.startTarget == nil ? deviceTokens(of: activityKey) : []
        let widgets = ignored == nil && !joins ? widgetTargets(template: template, app: app, record: record) : []
        let inputs = AssemblyInputs(
            activityKey: activityKey, memory: memory, record: record, app: app, floor: floor, registeredAt: registeredAt, devices: devices,
            startDevices: startDevices, widgets: widgets)
        return Preparation(template: template, inputs: inputs, writtenInPart: writtenInPart, ignored: ignored)
    }

    /// The event's requests, from its inputs.
    func assemble(_ event: ActivityEvent, _ preparation: Preparation, images: [String: [String]], now: Date) throws(ContentError) -> Decision {
        let inputs = preparation.inputs
        var memory = inputs.memory
        let version = inputs.record.flatMap { AppVersion($0.appVersion) } ?? Self.newest
        let result = try assembler.assemble(
            event, app: inputs.app, appVersion: version, locale: inputs.record?.locale, memory: &memory, now: now, images: images,
            timestampFloor: inputs.floor, tokenRegisteredAt: inputs.registeredAt,
            tokenFingerprint: event.startTarget != nil ? inputs.record?.fingerprint : nil)
        if let ignored = preparation.ignored {
            if let again = startsAgain(event, inputs, requests: result.requests, images: images, now: now) { return .send(again) }
            return .ignore(ignored)
        }
        // A start on the activity's broadcast channel for one more phone (each of a user's): the
        // activity's memory stays as it was.
        if result.requests.contains(where: \.joinsChannel) {
            let starts = withStartCopies(result.requests, event: event, inputs, images: images, now: now)
            return .send(Prepared(requests: starts, shrinks: result.shrinks, activityKey: inputs.activityKey, memory: nil))
        }
        let requests = result.requests.filter { $0.requestId != preparation.writtenInPart }
        let copied = withStartCopies(withDeviceCopies(requests, event: event, inputs, images: images, now: now), event: event, inputs, images: images, now: now)
        return .send(
            Prepared(
                requests: withWidgetPushes(copied, template: preparation.template, inputs, now: now),
                shrinks: result.shrinks,
                activityKey: inputs.activityKey, memory: memory))
    }

    /// An end whose alerting update was written and the end not (its writer stopped between
    /// the two, or Kafka refused the end while the partition moved): the event is read again
    /// by the next owner, whose memory has its sequence from the update (and its content, also
    /// when the freshness monitor sent it again since). The end is still owed; the update's
    /// request id is returned (not sent again).
    static func endWrittenInPart(_ event: ActivityEvent, activityKey: String, memory: ActivityMemory) -> String? {
        guard event.kind == .end, !memory.ended, memory.lastSequence == event.sequence else { return nil }
        let alert = RequestIds.alertBeforeEnd(bundleId: String(activityKey.prefix { $0 != "/" }), activityId: event.activityId, eventId: event.eventId)
        return memory.contentRequestId == alert ? alert : nil
    }

    /// Why the event is not applied (`nil`: it is): a duplicate or older sequence, an activity
    /// ended. Throws for a start of a live activity.
    static func whyIgnored(_ event: ActivityEvent, memory: ActivityMemory, endWrittenInPart: Bool) throws(ContentError) -> String? {
        if !endWrittenInPart, let last = memory.lastSequence, event.sequence <= last {
            return event.sequence == last ? "duplicate sequence \(event.sequence)" : "sequence \(event.sequence) is older than \(last)"
        } else if memory.ended, event.kind != .start {
            return "the activity has ended"
        } else if event.kind == .start, memory.isLive, !memory.startNeverArrived {
            // A second start would put a second Live Activity on the phone (a push-to-start) or
            // restart one that is running: end it first.
            throw ContentError(field: "kind", problem: "the activity is live (started, not ended): end it before starting it again")
        }
        return nil
    }

    /// Whom the event's requests are for: the key of its token (the activity's, or the
    /// push-to-start target's), that token if known, and the app.
    /// - Parameter ignored: the event is not applied (a duplicate): a user without devices is no error then.
    private func target(of event: ActivityEvent, activityKey: String, template: ActivityTemplate, memory: ActivityMemory, ignored: Bool) throws(ContentError)
        -> (key: String, record: DeliveryToken?, app: AppTarget)
    {
        // The token tells the app's environment and version; without one, the push-to-start
        // target's or the template's app.
        let key: String
        if let target = event.startTarget {
            // (A user's first device: ``resolvingUser(_:)`` named it, if the user has one.)
            guard let deviceId = target.deviceId ?? (ignored ? "" : nil) else {
                throw ContentError(
                    field: "startTarget.userId",
                    problem: "no device of this user has an active push-to-start token for \(event.attributesType) in \(target.app.bundleId)")
            }
            key = MessageKey.pushToStart(bundleId: target.app.bundleId, deviceId: deviceId, attributesType: event.attributesType)
        } else {
            key = activityKey
        }
        // A broadcast goes to no token: one payload for every phone, for the newest app version in
        // the default language (a push-to-start on its channel goes to one phone: for that phone's).
        // An activity started by a push whose own token is not read yet (the app registers it
        // right after the start; the backend's first update may come first): the push-to-start
        // token's app, version and locale, the same phone's.
        let record = template.broadcastStoragePolicy == nil || event.startTarget != nil
            ? tokens.token(forKey: key) ?? memory.startedWith.flatMap { tokens.token(forKey: $0) } : nil
        let bundleId = String(activityKey.prefix { $0 != "/" })
        // Without a token yet: the push-to-start target's app, else the app of what was last sent
        // (a remote start's), else the template's when it is that app.
        guard let app = record?.app ?? event.startTarget?.app ?? memory.latest?.app
                ?? template.app.flatMap({ $0.bundleId == bundleId ? $0 : nil })
        else {
            throw ContentError(
                field: "activityId",
                problem: "no token is registered for it in \(bundleId), and template \(template.attributesType) names \(template.app.map { "another app (\($0.bundleId))" } ?? "no app")")
        }
        return (key, record, app)
    }

    /// The activity an event is about, of its app (`<bundleId>/<activityId>`; activity ids are
    /// scoped per app). The app is the event's `bundleId`, else its push-to-start target's. An
    /// event without either (written before events named their app) goes to the only app that
    /// has the id live — an active token registered for it, or a live activity this service
    /// remembers — else to its template's app; when several apps have it, it is refused: the
    /// event must name its app (a guess could show one user's order on another's phone).
    public func activityKey(of event: ActivityEvent) throws(ContentError) -> String {
        if let bundleId = event.bundleId ?? event.startTarget?.app.bundleId {
            return MessageKey.activity(bundleId: bundleId, activityId: event.activityId)
        }
        let tokens = self.tokens
        var keys = Set(tokens.keys(forActivity: event.activityId).filter { tokens.token(forKey: $0)?.state == .active })
        state.withLock { state in
            for key in state.keys(ofActivity: event.activityId) where state.memory(key)?.isLive == true { keys.insert(key) }
        }
        if keys.count > 1 {
            throw ContentError(
                field: "bundleId",
                problem: "the activity id is live in several apps (\(keys.sorted().map { String($0.prefix { $0 != "/" }) }.joined(separator: ", "))): the event must name its app")
        }
        if let key = keys.first { return key }
        guard let app = assembler.templates[event.attributesType]?.app else {
            throw ContentError(
                field: "bundleId", problem: "the event names no app, no app has the activity live, and template \(event.attributesType) names no app")
        }
        return MessageKey.activity(bundleId: app.bundleId, activityId: event.activityId)
    }
}
