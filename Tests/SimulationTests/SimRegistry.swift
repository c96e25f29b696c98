import Foundation
import IsletMessages
@testable import TokenRegistry

/// token-registry as the simulation needs it: one instance, its table the records it wrote. It
/// registers tokens by the registry's own rules (``Registry/reregistration(of:as:now:)``: a token
/// registered again is confirmed, reactivated, or — a repeat — unchanged) and judges APNs's
/// verdicts read from the outcomes topic by the registry's own rule (``Registry/decide(_:current:)``).
final class SimRegistry {
    unowned let world: SimWorld
    private(set) var table: [String: TokenRecord] = [:]

    init(world: SimWorld) { self.world = world }

    /// The app's registration (answered once the record is on the topic).
    func register(_ proposed: TokenRecord, key: String) {
        world.scheduler.after(world.random.seconds(0.001, 0.05)) { [self] in
            let now = world.now
            var proposed = proposed
            proposed.registeredAt = now
            proposed.updatedAt = now
            guard let current = table[key] else { return write(proposed, key: key) }
            let (next, change) = Registry.reregistration(of: current, as: proposed, now: now)
            world.trace("token-registry: \(key) registered again: \(change.rawValue)")
            if change != .unchanged { write(next, key: key) }
        }
    }

    /// An outcome written: read after the registry's consumer lag, and judged.
    func outcomeAppended(_ outcome: PushOutcome) {
        guard outcome.result == .tokenInvalid, let key = outcome.key else { return }
        world.scheduler.after(world.random.seconds(0.005, 3)) { [self] in
            let decision = Registry.decide(outcome, current: table[key])
            guard case .invalidate(let reason, let since) = decision, var next = table[key] else {
                world.trace("token-registry: the verdict on \(key) is ignored (\(decision))")
                return
            }
            next.state = .invalidated
            next.invalidation = .init(reason: reason, invalidatedAt: world.now, apnsTimestamp: since)
            next.updatedAt = world.now
            world.trace("token-registry: \(key) invalidated by APNs's verdict")
            write(next, key: key)
        }
    }

    private func write(_ record: TokenRecord, key: String) {
        table[key] = record
        world.append(.token(record), key: key, writer: "token-registry")
    }
}
