import Foundation
import IsletMessages
import IsletTokens

/// A push-to-start to every device of a user (``ActivityEvent/PushToStartTarget/userId``): the
/// backend names the user, and the activity starts on each of their devices whose app registered
/// a push-to-start token for the event's attributes type (the token table knows whose each token
/// is: ``PartitionTokens/pushToStartKeys(bundleId:attributesType:owner:)``). The start is made for
/// the first device, as a start to that device would be; each other device gets its own start,
/// rendered for its app version and language, written just before it (``PushRequest/startGroup``
/// names the group on each). The activity's memory follows the first device's start; since another
/// device may have started the activity whatever the first one's outcome, the backend cannot start
/// it again until it is ended (``ActivityMemory/startNeverArrived``). Each device's app then
/// registers the activity's update token with its device id, and token-registry keeps one record
/// per device (the first to register is the activity's own record).
extension ContentEngine {
    /// One more device of the user a start goes to.
    struct StartDevice: Equatable, Sendable {
        /// Its push-to-start token's key (`pts:<bundleId>:<deviceId>:<attributesType>`).
        var key: String
        var deviceId: String
        var token: DeliveryToken
    }

    /// The most devices of a user one start goes to (the first included).
    static let maximumStartDevices = 16

    /// `event` as it is assembled for the user's first device (its target names that device as
    /// well as the user), and the user's other devices; `event` itself, and none, when it is not a
    /// start to a user's devices. Only active tokens of that user, one per token, by device id.
    func resolvingUser(_ event: ActivityEvent) -> (ActivityEvent, [StartDevice]) {
        guard event.kind == .start, let target = event.startTarget, target.deviceId == nil, let userId = target.userId else { return (event, []) }
        let owner = DeliveryToken.owner(of: userId)
        // A type sent by broadcast: only the devices of its channel's environment (a channel never crosses environments).
        let template = assembler.templates[event.attributesType]
        let environment = template?.broadcastStoragePolicy != nil ? template?.app?.environment : nil
        var seen: Set<String> = []
        var devices: [StartDevice] = []
        for key in tokens.pushToStartKeys(bundleId: target.app.bundleId, attributesType: event.attributesType, userId: userId) {
            guard devices.count < Self.maximumStartDevices else { break }
            guard let token = tokens.token(forKey: key), token.state == .active, token.owner == owner,
                environment.map({ token.app.environment == $0 }) ?? true,
                let deviceId = PartitionTokens.deviceId(ofPushToStartKey: key), seen.insert(token.fingerprint).inserted
            else { continue }
            devices.append(StartDevice(key: key, deviceId: deviceId, token: token))
        }
        // None: refused once the event is known not to be a duplicate (``target(of:activityKey:template:memory:)``).
        guard let first = devices.first else { return (event, []) }
        var resolved = event
        resolved.startTarget?.deviceId = first.deviceId
        return (resolved, Array(devices.dropFirst()))
    }

    /// How long after a start to a user's devices the same event read again makes those starts
    /// again (``startsAgain(_:_:requests:images:now:)``): the dispatcher's memory of finished
    /// push-to-starts (``RecentOutcomes/clockMargin``).
    static let startsAgainWindow: TimeInterval = 600

    /// A start to every device of a user read again (the memory has it: its sequence, its first
    /// device's start) within ``startsAgainWindow`` of it: every device's start again, under the
    /// same ids, changing no memory. The device starts are written to the partitions of their
    /// push-to-start keys, not the activity's: Kafka may have stored the first device's and lost
    /// another's before its writer stopped, and the next owner, whose memory follows the first
    /// device's, would take the event for a duplicate. The dispatcher takes each id once.
    func startsAgain(_ event: ActivityEvent, _ inputs: AssemblyInputs, requests: [PushRequest], images: [String: [String]], now: Date) -> Prepared? {
        guard event.kind == .start, event.startTarget?.userId != nil, event.startTarget?.deviceId != nil, let latest = inputs.memory.latest,
            latest.isUserStart, latest.contentSequence == event.sequence, now.timeIntervalSince(latest.createdAt) <= Self.startsAgainWindow
        else { return nil }
        let starts = withStartCopies(requests.filter { $0.pushToStartKey != nil && $0.startGroup != nil }, event: event, inputs, images: images, now: now)
        // Only the same event (its starts' ids are the ones made before): another event with the
        // start's sequence (another id) is a duplicate, not a second start on each device.
        guard starts.contains(where: { latest.isRequest($0.requestId) }) else { return nil }
        return Prepared(requests: starts, shrinks: [], activityKey: inputs.activityKey, memory: nil)
    }

    /// `requests`, their push-to-start preceded by one for each other device of the user
    /// (``AssemblyInputs/startDevices``): the event assembled again for that device (its app
    /// version and language, from the same memory: the same sequence and timestamp), under its own
    /// id (the event's, derived with the device's: ``RequestIds/copy(of:deviceId:)``, as the first
    /// device's is). A device whose version the template cannot show gets none.
    func withStartCopies(
        _ requests: [PushRequest], event: ActivityEvent, _ inputs: AssemblyInputs, images: [String: [String]], now: Date
    ) -> [PushRequest] {
        guard !inputs.startDevices.isEmpty, let index = requests.firstIndex(where: { $0.pushToStartKey != nil && $0.startGroup != nil }) else {
            return requests
        }
        let group = requests[index].requestId
        // A start on a broadcast channel is checked against each device's own environment (a
        // channel never crosses environments): a device of the other one gets none.
        let joins = requests[index].joinsChannel
        var copies: [PushRequest] = []
        for device in inputs.startDevices {
            var deviceEvent = event
            deviceEvent.startTarget?.deviceId = device.deviceId
            var scratch = inputs.memory
            guard
                let made = try? assembler.assemble(
                    deviceEvent, app: joins ? device.token.app : inputs.app, appVersion: AppVersion(device.token.appVersion) ?? Self.newest,
                    locale: device.token.locale,
                    memory: &scratch, now: now, images: images, timestampFloor: inputs.floor, tokenRegisteredAt: device.token.registeredAt,
                    tokenFingerprint: device.token.fingerprint),
                var start = made.requests.first(where: { $0.pushToStartKey == device.key })
            else { continue }
            start.startGroup = group
            copies.append(start)
        }
        var all = requests
        all.insert(contentsOf: copies, at: index)
        return all
    }
}
