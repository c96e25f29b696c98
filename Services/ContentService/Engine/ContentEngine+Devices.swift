import Foundation
import IsletMessages
import IsletTokens

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

    /// The activity's other devices with an active token, by device.
    func deviceTokens(of activityKey: String) -> [DeviceToken] {
        tokens.deviceKeys(ofActivity: activityKey).compactMap { key in
            guard let (_, deviceId) = MessageKey.splitDevice(key), let token = tokens.token(forKey: key), token.state == .active else { return nil }
            return DeviceToken(key: key, deviceId: deviceId, token: token)
        }
    }

    /// `requests`, each followed by its copies for the activity's other devices. A device whose
    /// app version or language differs from the token the requests were made for gets its content
    /// assembled for its own (from the same memory, so the same ids, sequence and timestamps); one
    /// its version cannot show (the template refuses it) gets no copy of this event.
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
                guard let payload = own.first(where: { $0.requestId == request.requestId })?.payload else { continue }
                copies[index].append(Self.copy(of: request, for: device, payload: payload))
            }
        }
        return zip(requests, copies).flatMap { [$0] + $1 }
    }

    /// `requests`, each followed by its copies for `devices`, with the same payload (the
    /// freshness monitor's end, made from the activity's latest request).
    func withDeviceCopies(_ requests: [PushRequest], devices: [DeviceToken]) -> [PushRequest] {
        requests.flatMap { request in
            Self.isCopied(request) ? [request] + devices.map { Self.copy(of: request, for: $0, payload: request.payload) } : [request]
        }
    }

    /// A request for the activity's own token (not a broadcast, not a push-to-start, not a copy).
    static func isCopied(_ request: PushRequest) -> Bool {
        request.activityId != nil && !request.isBroadcast && !request.isDeviceCopy
    }

    static func copy(of request: PushRequest, for device: DeviceToken, payload: String) -> PushRequest {
        var copy = request
        copy.requestId = RequestIds.copy(of: request.requestId, deviceId: device.deviceId)
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
