import Synchronization

/// When the cluster last answered a client, and the probe that asks it when nothing else does.
final class ClusterContact: Sendable {
    private let at = Atomic<UInt64>(0)
    private let refusal = Mutex<LoginRefused?>(nil)

    /// When the cluster last answered (``MonotonicTime``; 0: never).
    var last: UInt64 { at.load(ordering: .acquiring) }

    /// The cluster's last refusal of the client's login (SASL), if one came after its last answer.
    var loginRefused: LoginRefused? {
        let last = self.last
        return refusal.withLock { refused in refused.flatMap { $0.at >= last ? $0 : nil } }
    }

    /// librdkafka reported `error` (any thread): an authentication failure is kept for the health.
    func observe(_ error: KafkaError, at now: UInt64 = MonotonicTime.now()) {
        guard error.isAuthenticationFailure else { return }
        refusal.withLock { $0 = LoginRefused(at: now, reason: error.message) }
    }

    /// The cluster answered (an acknowledgement, records fetched, a rebalance, a probe).
    func heard(at now: UInt64 = MonotonicTime.now()) {
        at.store(now, ordering: .releasing)
    }

    /// While `running` holds (and the task is not cancelled): asks the cluster for metadata
    /// whenever nothing was heard from it for a probe interval, so that a client's health knows
    /// whether it answers even when the client has nothing else to do. `client` is the handle to
    /// ask (`nil`: none now, e.g. while a producer is recreated).
    func probe(policy: KafkaHealthPolicy, while running: () -> Bool, client: () -> RDKafkaClient?) async {
        let interval = MonotonicTime.nanoseconds(policy.probeInterval)
        let timeout = policy.probeTimeout.librdkafkaMilliseconds
        repeat {
            guard running() else { return }
            if MonotonicTime.now() &- last >= interval, let client = client(),
                await DedicatedThread.run(name: "islet-kafka-probe", { client.probe(timeoutMilliseconds: timeout) })
            {
                heard()
            }
        } while (try? await Task.sleep(for: policy.probeInterval)) != nil
    }
}
