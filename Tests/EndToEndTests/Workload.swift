import APNsSimulator
import Foundation
import IsletKafka
import IsletLinks
import IsletMessages
import NIOHTTP1
import Synchronization
import Testing

/// What a client's calls got: the ids accepted (taps' click ids, registered activities) and the
/// refusals by status (0: no answer).
final class Answers: Sendable {
    private let state = Mutex<(accepted: Set<String>, refused: [Int: Int])>(([], [:]))
    var accepted: Set<String> { state.withLock { $0.accepted } }
    var refused: [Int: Int] { state.withLock { $0.refused } }
    func accept(_ id: String) { state.withLock { _ = $0.accepted.insert(id) } }
    func refuse(_ status: Int) { state.withLock { $0.refused[status, default: 0] += 1 } }
    var summary: String {
        state.withLock { state in
            "\(state.accepted.count) accepted, refused \(state.refused.sorted { $0.key < $1.key }.map { "\($0.key == 0 ? "no answer" : String($0.key)) ×\($0.value)" })"
        }
    }
}

/// Ingest refused a tap: its HTTP status (0: no answer; -1: the link could not be signed).
struct TapRefused: Error { let status: Int }

extension Stack {
    /// The app forwards a tap on a widget link of `activity`, signed with content-service's key as
    /// the phone received it: the click id when ingest answered 200.
    func forwardTap(activity: String) async -> Result<String, TapRefused> {
        guard let key = try? LinkKeyring.keys(fromSecrets: [linkKey.kid: linkKey.secret]).first,
            let link = try? DeepLinkCodec.sign(
                baseURL: "fooddelivery://order/1",
                target: TapTarget(activityId: activity, attributesType: "DeliveryAttributes", surface: .lockScreen, element: "status", contentSequence: 1),
                issuedAt: Date(), key: key)
        else { return .failure(TapRefused(status: -1)) }
        let tap: JSONValue = ["url": .string(link), "tappedAt": .string(IsletDate.format(Date())), "appVersion": "3.0", "osVersion": "18.1"]
        guard let (status, body) = try? await HTTP.request(url(.ingest) + "/v1/taps", method: .POST, body: tap.jsonBytes, timeout: .seconds(10)) else {
            return .failure(TapRefused(status: 0))
        }
        if status == 200, let answer = try? IsletJSON.decodeValue(JSONValue.self, from: body), let id = answer["clickId"]?.stringValue { return .success(id) }
        return .failure(TapRefused(status: status))
    }
}

/// A flag one task lowers and others watch.
final class Flag: Sendable {
    private let raised = Atomic<Bool>(true)
    var isRaised: Bool { raised.load(ordering: .relaxed) }
    func lower() { raised.store(false, ordering: .relaxed) }
}

/// The load of the crash and graceful-stop runs: `activities` activities (one in ten started by
/// push-to-start, a device each; the others by the app) each receiving `events / activities`
/// events (start, updates, end) from the backend at about 250 events/s, while the app forwards
/// about 10 taps a second; `disrupt` runs meanwhile (kills, stops, restarts).
struct Workload {
    let stack: Stack
    let driver: Driver
    let activities: [String]
    let remote: Set<String>
    let perActivity: Int
    /// Raised while the backend still publishes: a disruption waiting for pushes stops waiting once
    /// it is lowered (nothing more is coming).
    let publishing = Flag()
    let ride = AppTarget(bundleId: "com.example.ride", environment: .production)

    init(stack: Stack, driver: Driver, events: Int, activities count: Int) {
        self.stack = stack
        self.driver = driver
        activities = (0..<count).map { "\(driver.run)a\($0)" }
        remote = Set(activities.enumerated().filter { $0.offset % 10 == 0 }.map(\.element))
        perActivity = max(3, events / count)
    }

    /// What a run left behind.
    struct Report {
        var ledger: Ledger
        /// The pushes the simulator accepted for the run's requests (without payloads).
        var received: [AcceptedNotification]
        var taps: Answers
        var clicks: Set<String>
        /// Events of the run without a push request.
        var missingEvents: [String]
        /// Push ids received more than once, with their copies.
        var duplicates: [[AcceptedNotification]] { Dictionary(grouping: received) { $0.apnsID.lowercased() }.values.filter { $0.count > 1 } }
        /// Push-to-start tokens that received more than one start.
        var startedTwice: [String] { Dictionary(grouping: received.filter { $0.event == "start" }, by: \.token).filter { $0.value.count > 1 }.map(\.key) }
    }

    func run(disrupt: @escaping @Sendable () async throws -> Void) async throws -> Report {
        try await register()
        let taps = Answers()
        let streaming = Flag()
        let disruption = Task { try await disrupt() }
        defer { disruption.cancel() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { streaming.lower() }
                do {
                    defer { publishing.lower() }
                    try await stream()
                }
                try await disruption.value
            }
            group.addTask { try await tap(into: taps, while: streaming) }
            try await group.waitForAll()
        }
        let sent = activities.flatMap { activity in (1...perActivity).map { "\(activity)-\($0)" } }
        let ledger = try await Ledger.settle(
            bootstrap: stack.bootstrap, prefix: driver.run, expecting: activities.count * perActivity, timeout: .seconds(300)
        ) { ledger in
            let events = Set(ledger.requests.values.compactMap(\.sourceEventId))
            return sent.allSatisfy(events.contains)
        }
        let events = Set(ledger.requests.values.compactMap(\.sourceEventId))
        let missing = sent.filter { !events.contains($0) }
        let received = try await stack.received(payloads: false).filter { ledger.requests[$0.apnsID.lowercased()] != nil }
        let clicks = Set(
            try await readToEnd([IsletTopics.clicks.name], bootstrap: stack.bootstrap).compactMap { try? IsletJSON.decode(ClickEvent.self, from: $0.value ?? []).clickId })
        return Report(ledger: ledger, received: received, taps: taps, clicks: clicks, missingEvents: missing)
    }

    /// The apps register their tokens (8 at a time).
    func register() async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            for slice in 0..<8 {
                group.addTask {
                    for (index, activity) in activities.enumerated() where index % 8 == slice {
                        if remote.contains(activity) {
                            try await driver.registerPushToStart(
                                bundleId: ride.bundleId, device: activity + "-device", type: "RideAttributes", token: Driver.token(activity + "-start"))
                        } else {
                            try await driver.registerActivity(activity, token: Driver.token(activity), type: "DeliveryAttributes", bundleId: "com.example.food")
                        }
                    }
                }
            }
            try await group.waitForAll()
        }
    }

    /// The backend: round r gives every activity its r-th event.
    func stream() async throws {
        for round in 1...perActivity {
            for (index, activity) in activities.enumerated() {
                let kind: ActivityEventKind = round == 1 ? .start : round == perActivity ? .end : .update
                let isRemote = remote.contains(activity)
                let progress = JSONValue.integer(Int64(round * 100 / perActivity))
                let fields: [String: JSONValue] =
                    isRemote
                    ? ["rideId": .string(activity), "phase": round == 1 ? "matching" : round == perActivity ? "dropped_off" : "en_route",
                       "driver": ["name": "Sam", "vehicle": "Blue Prius", "plate": "KX 42 LT"], "progress": progress]
                    : ["orderId": .string(activity), "storeName": "Casa Lola", "status": round == perActivity ? "delivered" : "out_for_delivery",
                       "courier": ["name": "Ana"], "progress": progress]
                let event = driver.event(
                    activity, kind, type: isRemote ? "RideAttributes" : "DeliveryAttributes", sequence: Int64(round), urgency: .routine, fields: fields,
                    startTarget: isRemote && round == 1 ? .init(app: ride, deviceId: activity + "-device") : nil,
                    attributes: isRemote && round == 1 ? ["rideId": .string(activity)] : nil)
                try await driver.publish(event)
                if index % 25 == 24 { try await Task.sleep(for: .milliseconds(100)) }
            }
            if round == 1 {
                // iOS started the remote activities: their apps register the activities' own tokens.
                for activity in remote {
                    try await driver.registerActivity(
                        activity, token: Driver.token(activity), type: "RideAttributes", bundleId: ride.bundleId, deviceId: activity + "-device")
                }
            }
        }
    }

    /// The app: forwards taps on widget links (signed with content-service's key, as the phones
    /// received them), about 10 a second, while `flag` is raised.
    func tap(into taps: Answers, while flag: Flag) async throws {
        var number = 0
        while flag.isRaised {
            number += 1
            switch await stack.forwardTap(activity: activities[number % activities.count]) {
            case .success(let id): taps.accept(id)
            case .failure(let refused): taps.refuse(refused.status)  // 0: ingest was down; the app would retry later
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}
