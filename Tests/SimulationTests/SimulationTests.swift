import Foundation
import Testing

/// The delivery contract under the operations of a real deployment, by deterministic simulation
/// (docs/operations.md, "The delivery contract"): every seed is a whole run — content-services and
/// dispatchers killed, stopped, stalled and rejoining while backend events flow, Kafka refuses or
/// holds writes and APNs misbehaves — checked against the invariants as it goes and at its end. A failing seed prints its trace and replays exactly:
/// `scripts/simulate.sh --seed N --verbose`.
struct SimulationTests {
    /// Seeds run by `swift test` (CI): `ISLET_SIM_SEEDS` of them, from `ISLET_SIM_FIRST_SEED`,
    /// spread over the chunks below so that both cores work.
    static let chunks = 16
    static var seedCount: Int { ProcessInfo.processInfo.environment["ISLET_SIM_SEEDS"].flatMap(Int.init) ?? 5_000 }
    static var firstSeed: UInt64 { ProcessInfo.processInfo.environment["ISLET_SIM_FIRST_SEED"].flatMap(UInt64.init) ?? 1 }

    @Test("seeds", arguments: 0..<chunks)
    func seeds(chunk: Int) {
        let count = Self.seedCount
        let perChunk = (count + Self.chunks - 1) / Self.chunks
        let lower = chunk * perChunk
        let upper = min(count, lower + perChunk)
        guard lower < upper else { return }
        var assembledAheadUsed = 0
        defer {
            // Events that came through an API are sent as assembled there when nothing changed:
            // the simulation exercises that path, not only the assembly again.
            if upper - lower >= 20 { #expect(assembledAheadUsed > 0) }
        }
        for index in lower..<upper {
            let seed = Self.firstSeed + UInt64(index)
            let result = Simulation.run(seed: seed)
            assembledAheadUsed += result.assembledAheadUsed
            if !result.violations.isEmpty {
                report(result)
                // One failing seed per chunk is enough to read, unless asked for all (a census).
                if ProcessInfo.processInfo.environment["ISLET_SIM_KEEP_GOING"] != "1" { return }
            }
        }
    }

    /// Seed 15311, found by `scripts/simulate.sh --seeds 20000` (after 7d283bc): content-service's
    /// write of request 8b4f5bda was stored twice (its acknowledgement lost); the dispatcher
    /// coalesced the first copy, then finished twenty other requests, past its memory of finished
    /// ones (`rememberedFinished`, drawn as 16 here), and gave the second copy a second final
    /// outcome (`awaitingToken`). The dispatcher now also remembers each activity's last finished
    /// requests for 10 minutes (`rememberedFinishedPerActivity`).
    @Test("seed 15311: a copy read after the dispatcher's window of finished requests moved past it is released, not given a second outcome")
    func seed15311() {
        let result = Simulation.run(seed: 15311, secondDevices: false, widgets: false)
        #expect(result.violations.isEmpty, "\(result.violations.map(\.description))")
    }

    /// Seed 24440, found by seeds 15,000–30,000: a push-to-start waited two minutes behind an
    /// outcomes topic its dispatcher could not read, and reached the phone after its activity's end
    /// had given up waiting for a token (`awaitingToken`); the activity stayed on the phone.
    /// content-service now sends the end again when a start's outcome says it reached a device
    /// after the end was made (`ContentEngine.endsOwed`): that device's activity is this one,
    /// whenever its token comes.
    @Test("seed 24440: a push-to-start that reaches the phone after its activity's end gets that end")
    func seed24440() {
        let result = Simulation.run(seed: 24440, secondDevices: false, widgets: false)
        #expect(result.violations.isEmpty, "\(result.violations.map(\.description))")
    }

    /// Seed 6336, found by seeds 3,001–15,000 once activities were followed on a second device:
    /// content-1's token replica lagged 2 s behind the iPad's registration, so the activity's end
    /// went to the first device only; content-1 was killed before its next pass caught the iPad up,
    /// and the instance the partition moved to had read the iPad's record before that end was made,
    /// so it took the iPad as copied. The iPad kept the activity ("activity ends"). An instance a
    /// partition goes to now sends the end of each activity that ended there within the hour to
    /// each device whose activity started before it (`ContentEngine.devicesOfRecentEnds`).
    @Test("seed 6336: a device an instance that was killed left without the end gets it from the next owner")
    func seed6336() {
        let result = Simulation.run(seed: 6336, userStarts: false, widgets: false)
        #expect(result.violations.isEmpty, "\(result.violations.map(\.description))")
    }

    /// Seed 19734, found by `scripts/simulate.sh --seeds 20000`, the same gap: content-2 was killed
    /// while its end of an activity was in flight; Kafka took the activity's own end but refused
    /// its copy for the iPad (written just before it), and the next owner, whose memory had the
    /// end, ignored the event read again. Held by the same fix as 6336.
    @Test("seed 19734: a device's copy of an end that Kafka refused while it took the activity's own end is made by the next owner")
    func seed19734() {
        let result = Simulation.run(seed: 19734, userStarts: false, widgets: false)
        #expect(result.violations.isEmpty, "\(result.violations.map(\.description))")
    }

    /// Seed 10099, found with seed 6336 (its activity is on one device: the second devices' draws
    /// only moved the seed's trajectory onto it): content-1 wrote requests #6–#8 of an activity
    /// stamped t31 and was stopped, and Kafka stored them only after content-2, the partition's
    /// next owner, had written #6 again stamped t41. The dispatcher sent #6 at t41, then #8 at t31,
    /// which the phone ignored (content-2's own #8 came later, a copy of a finished request, not
    /// sent). The dispatcher now sends newer content with at least the newest timestamp it sent the
    /// activity (`DispatchMachine.timestamp(for:key:)`); without that, this seed breaks ("newer hidden").
    @Test("seed 10099: requests a stopped instance stamped earlier, stored after the next owner's, still reach the phone as newer content")
    func seed10099() {
        let result = Simulation.run(seed: 10099, userStarts: false, widgets: false)
        #expect(result.violations.isEmpty, "\(result.violations.map(\.description))")
    }

    /// One seed, with its whole trace printed (`ISLET_SIM_SEED`).
    @Test("one seed", .enabled(if: ProcessInfo.processInfo.environment["ISLET_SIM_SEED"] != nil))
    func one() {
        let seed = UInt64(ProcessInfo.processInfo.environment["ISLET_SIM_SEED"]!)!
        let result = Simulation.run(seed: seed, verbose: ProcessInfo.processInfo.environment["ISLET_SIM_VERBOSE"] == "1")
        print(result.summary)
        if !result.violations.isEmpty { report(result) }
    }

    private func report(_ result: Simulation.Result) {
        let broken = Set(result.violations.map(\.invariant)).sorted().joined(separator: ", ")
        let text = """
            seed \(result.seed) broke: \(broken)
            \(result.summary)
            \(result.violations.map(\.description).joined(separator: "\n"))
            last events:
            \(result.trace.suffix(120).joined(separator: "\n"))
            replay: scripts/simulate.sh --seed \(result.seed) --verbose
            """
        Issue.record(Comment(rawValue: text))
    }
}
