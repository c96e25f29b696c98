import Foundation
import IsletMessages
@testable import APNsDispatcher

/// One seed's run: a deployment drawn from the seed (how many dispatchers, the rebalance protocol,
/// the faults' rates, the workload), the operations of a real deployment at times drawn from it
/// (kill -9 and restart, SIGTERM and restart, a stalled member whose session expires, a member
/// that leaves and joins again, lagging token replicas), run to its end on simulated time, then
/// the invariants.
enum Simulation {
    struct Result {
        var seed: UInt64
        var violations: [SimViolation]
        var trace: [String]
        var summary: String
        /// Events sent as assembled at their check (the assembly kept ahead used).
        var assembledAheadUsed = 0
    }

    /// How long the workload runs, and how long the run goes on after it (retries, token waits
    /// and rebalances settle; every process is running again well before).
    static let workloadSeconds: TimeInterval = 120
    static let runSeconds: TimeInterval = 1_200

    /// - Parameter secondDevices: some activities the app started are followed on a second device
    ///   too (off: the workload a seed had before devices were simulated).
    /// - Parameter userStarts: each user has an iPad with a push-to-start token too, and some
    ///   starts go to every device of the user (off, or without `secondDevices`: the workload a
    ///   seed had before).
    /// - Parameter widgets: a few phones have the order widget, reloaded by WidgetKit push (off: the
    ///   workload a seed had before).
    static func run(seed: UInt64, verbose: Bool = false, secondDevices: Bool = true, userStarts: Bool = true, widgets: Bool = true) -> Result {
        let world = SimWorld(seed: seed, partitions: 4)
        world.traceLog.verbose = verbose
        let random = world.random
        var policy = DispatcherPolicy()
        policy.rememberedFinished = random.pick([16, 64, 100_000])
        policy.maximumQueued = random.pick([8, 40, 20_000])
        policy.maximumInFlight = random.pick([4, 64])
        policy.initialInFlight = min(policy.initialInFlight, policy.maximumInFlight)
        policy.minimumInFlight = min(policy.minimumInFlight, policy.maximumInFlight)
        // What came after the first seeds were recorded is drawn from a stream of its own, so that
        // a seed's deployment, operations and workload stay what they were.
        let later = SimRandom(seed: seed ^ 0x0DD5_EED5_0F0C_7A6E)
        policy.maximumAwaitingRequests = later.pick([2, 6, 20_000])
        var outages: [String] = []
        if later.chance(0.4) {
            for _ in 0..<later.int(1...2) {
                let (from, seconds) = (later.seconds(0, workloadSeconds + 30), later.pick([20, 120, 400, 600.0]) * (0.5 + later.unit()))
                world.outcomeOutages.append(SimWorld.start.addingTimeInterval(from)...SimWorld.start.addingTimeInterval(from + seconds))
                outages.append("outcomes unreadable from \(Int(from)) s for \(Int(seconds)) s")
            }
        }
        let rebalanceProtocol: SimGroup.RebalanceProtocol = random.chance(0.5) ? .eager : .cooperative
        world.dispatchers = SimGroup(topic: world.requests, rebalanceProtocol: rebalanceProtocol, revocationLimit: 11, world: world)
        world.apns = SimAPNs(world: world)
        world.phones = SimPhones(world: world)
        world.registry = SimRegistry(world: world)
        let count = random.int(2...3)
        world.dispatcherInstances = (1...count).map { SimDispatcher(name: "dispatcher-\($0)", world: world, policy: policy) }
        for dispatcher in world.dispatcherInstances {
            world.scheduler.after(random.seconds(0, 1)) { dispatcher.start() }
        }
        let contentProtocol: SimGroup.RebalanceProtocol = random.chance(0.5) ? .eager : .cooperative
        world.contents = SimGroup(topic: world.events, rebalanceProtocol: contentProtocol, revocationLimit: 12, world: world)
        let contentCount = random.int(2...3)
        world.contentInstances = (1...contentCount).map { SimContent(name: "content-\($0)", world: world) }
        for content in world.contentInstances { content.replicaLagging = random.pick([0.0, 0.03, 0.3]) }
        for content in world.contentInstances {
            world.scheduler.after(random.seconds(0, 1)) { content.start() }
        }
        // librdkafka commits what was marked every 5 s.
        func autoCommit() {
            world.dispatchers.autoCommit()
            world.contents.autoCommit()
            world.scheduler.after(5, autoCommit)
        }
        world.scheduler.after(5, autoCommit)

        // The operations of a deployment, while the workload runs.
        let operations = random.int(1...5)
        var described: [String] = []
        for _ in 0..<operations {
            let at = random.seconds(2, workloadSeconds + 30)
            if random.chance(0.35) {
                // content-service: kill -9, SIGTERM (a deploy), each with a restart.
                let content = random.pick(world.contentInstances)
                if random.chance(0.5) {
                    let restart = random.seconds(0.5, 20)
                    described.append("kill -9 \(content.name) at \(Int(at)) s")
                    world.scheduler.after(at) {
                        guard content.phase == .running else { return }
                        content.kill()
                        world.scheduler.after(restart) { if content.phase == .down { content.start() } }
                    }
                } else {
                    described.append("SIGTERM \(content.name) at \(Int(at)) s")
                    world.scheduler.after(at) { content.terminate(restartAfter: random.seconds(0.5, 10)) }
                }
                continue
            }
            let dispatcher = random.pick(world.dispatcherInstances)
            switch random.int(0...4) {
            case 0:
                let restart = random.seconds(0.5, 20)
                described.append("kill -9 \(dispatcher.name) at \(Int(at)) s")
                world.scheduler.after(at) {
                    guard dispatcher.phase == .running else { return }
                    dispatcher.kill()
                    world.scheduler.after(restart) { if dispatcher.phase == .down { dispatcher.start() } }
                }
            case 1:
                described.append("SIGTERM \(dispatcher.name) at \(Int(at)) s")
                world.scheduler.after(at) { dispatcher.terminate(restartAfter: random.seconds(0.5, 10)) }
            case 2:
                let seconds = random.pick([3, 15, 40.0]) * random.unit() + 1
                described.append("stall \(dispatcher.name) at \(Int(at)) s for \(Int(seconds)) s")
                world.scheduler.after(at) { dispatcher.stall(for: seconds) }
            case 3:
                described.append("\(dispatcher.name) rejoins at \(Int(at)) s")
                world.scheduler.after(at) { dispatcher.rejoin() }
            default:
                described.append("\(dispatcher.name)'s token replica lags from \(Int(at)) s")
                world.scheduler.after(at) { dispatcher.replicaLag = 1...15 }
                world.scheduler.after(at + 60) { dispatcher.replicaLag = 0.001...0.2 }
            }
        }
        described += outages
        let workload = SimWorkload(world: world)
        workload.secondDevices = secondDevices
        workload.userStarts = secondDevices && userStarts
        workload.widgets = widgets
        workload.plan(activities: random.int(4...10), devices: 3, duration: workloadSeconds)

        let end = SimWorld.start.addingTimeInterval(runSeconds)
        while world.scheduler.runNext(until: end) {}
        world.checkAtEnd()
        let summary = """
            seed \(seed): \(contentCount) content-services (\(contentProtocol)), \(count) dispatchers, \(rebalanceProtocol) rebalances, remembered \(policy.rememberedFinished), \
            queue \(policy.maximumQueued), awaiting \(policy.maximumAwaitingRequests), in flight \(policy.maximumInFlight); \(workload.plans.count) activities (\(workload.secondDeviceCount) on two devices, \(workload.userStartCount) started on every device of a user; \(workload.widgetCount) order widgets, \(world.phones.widgetReloads) reloads), \
            \(world.requestsById.count) requests, \(world.assembledAheadUsed) events as assembled at the check; \(described.joined(separator: ", ")); \(world.scheduler.steps) steps
            """
        return Result(seed: seed, violations: world.violations, trace: world.traceLog.last, summary: summary, assembledAheadUsed: world.assembledAheadUsed)
    }
}
