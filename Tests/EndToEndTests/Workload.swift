import APNsSimulator
import Foundation
import IsletLinks
import IsletMessages
import Synchronization
import Testing

/// Taps the workload forwarded and what ingest answered.
final class TapLog: Sendable {
    private let state = Mutex<(accepted: Set<String>, refused: [Int: Int])>(([], [:]))
    var accepted: Set<String> { state.withLock { $0.accepted } }
    var refused: [Int: Int] { state.withLock { $0.refused } }
    func accept(_ clickId: String) { state.withLock { _ = $0.accepted.insert(clickId) } }
    func refuse(_ status: Int) { state.withLock { $0.refused[status, default: 0] += 1 } }
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
        var taps: TapLog
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
        let taps = TapLog()
        let streaming = Flag()
        let disruption = Task { try await disrupt() }
        defer { disruption.cancel() }
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { streaming.lower() }
                try await stream()
                try await disruption.value
            }
            group.addTask { try await tap(into: taps, while: streaming) }
            try await group.waitForAll()
        }
        let ledger = try await Ledger.settle(bootstrap: stack.bootstrap, prefix: driver.run, expecting: activities.count * perActivity, timeout: .seconds(300))
        let events = Set(ledger.requests.values.compactMap(\.sourceEventId))
        let missing = activities.flatMap { activity in (1...perActivity).map { "\(activity)-\($0)" } }.filter { !events.contains($0) }
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
    func tap(into taps: TapLog, while flag: Flag) async throws {
        let key = try #require(try LinkKeyring.keys(fromSecrets: [stack.linkKey.kid: stack.linkKey.secret]).first)
        var number = 0
        while flag.isRaised {
            number += 1
            let target = TapTarget(
                activityId: activities[number % activities.count], attributesType: "DeliveryAttributes", surface: .lockScreen, element: "status",
                contentSequence: 1)
            let link = try DeepLinkCodec.sign(baseURL: "fooddelivery://order/1", target: target, issuedAt: Date(), key: key)
            let tap: JSONValue = ["url": .string(link), "tappedAt": .string(IsletDate.format(Date())), "appVersion": "3.0", "osVersion": "18.1"]
            do {
                let (status, body) = try await HTTP.request(stack.url(.ingest) + "/v1/taps", method: .POST, body: tap.jsonBytes, timeout: .seconds(10))
                if status == 200, let answer = try? IsletJSON.decodeValue(JSONValue.self, from: body), let id = answer["clickId"]?.stringValue {
                    taps.accept(id)
                } else {
                    taps.refuse(status)
                }
            } catch {
                taps.refuse(0)  // no answer (ingest was down): the app would retry later
            }
            try await Task.sleep(for: .milliseconds(100))
        }
    }
}
