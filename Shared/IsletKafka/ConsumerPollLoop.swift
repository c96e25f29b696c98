import Foundation
import Logging

/// The thin loop that drives librdkafka for a ``KafkaConsumer``, on a thread of its own: it asks
/// the ``ConsumerMachine`` (through ``ConsumerCore``) for the next step and performs it — poll a
/// batch, recreate the handle after a fatal error, or close and finish. Lives and dies on the
/// poll thread: not shared.
final class ConsumerPollLoop {
    private let core: ConsumerCore
    private let current: CurrentClient
    private let configuration: KafkaConsumerConfiguration
    private let logger: Logger
    private let reader: RDKafkaBatchReader
    private let pollMilliseconds: Int32
    /// The handle's properties: a starved consumer's next handle fetches with a longer wait.
    private var properties: [String: String]
    /// Where a replica goes on after its handle was replaced: the next offset of each partition.
    private var positions: [KafkaTopicPartition: Int64]
    private var client: RDKafkaClient

    init(configuration: KafkaConsumerConfiguration, properties: [String: String], core: ConsumerCore, current: CurrentClient, logger: Logger) {
        self.core = core
        self.current = current
        self.configuration = configuration
        self.logger = logger
        self.properties = properties
        self.positions = configuration.replicaStartPositions ?? [:]
        self.reader = RDKafkaBatchReader(capacity: configuration.batchSize)
        let timeout = configuration.pollTimeout.components
        self.pollMilliseconds = Int32(clamping: timeout.seconds * 1_000 + timeout.attoseconds / 1_000_000_000_000_000)
        self.client = current.client
    }

    /// Joins, then drives librdkafka until a stop; returns the error that kept it from joining.
    func run() -> KafkaError? {
        core.useFetchWait(milliseconds: Self.fetchWaitMilliseconds(properties), newHandle: false)
        do throws(KafkaError) {
            try join(client)
        } catch {
            core.finishEvents()
            return error
        }
        while true {
            switch core.nextStep(fatal: client.fatalError()) {
            case .poll:
                guard pollOnce() else { return finish(.close) }
            case .recreate(let fatal):
                guard replace(after: fatal) else { return finish(.close) }
            case .finish(let how):
                return finish(how)
            }
        }
    }

    /// Stores marks, watches the lag, applies backpressure and hands a batch to the caller's
    /// buffer; `false` when the consumer was stopped while its handle was being replaced.
    private func pollOnce() -> Bool {
        core.storeMarkedOffsets(into: client)
        if let wait = core.watchLag(client) {
            return lengthenFetchWait(to: wait)
        }
        // A full buffer pauses fetching rather than this loop: rebalances and the
        // group's poll interval keep being served while the caller catches up.
        core.applyBackpressure(client)
        var batch: [KafkaConsumerEvent] = []
        // Epochs are read after the call: rebalances happen inside it.
        let errors = reader.read(from: client, timeoutMilliseconds: pollMilliseconds, into: &batch) { core.assignmentEpochs() }
        for error in errors {
            core.consumeError(error)
        }
        if !batch.isEmpty {
            if configuration.membership == .replica {
                for case .message(let message) in batch { positions[message.topicPartition] = message.offset + 1 }
            }
            core.deliver(batch)
        }
        return true
    }

    /// Commits what was marked and leaves the group (``ConsumerMachine/Finish/close``) unless the
    /// handle was abandoned; then no more events.
    private func finish(_ how: ConsumerMachine.Finish) -> KafkaError? {
        defer { core.finishEvents() }
        // A handle destroyed while its replacement was being made has nothing left to close.
        guard how == .close, !client.isAbandoned else { return nil }
        core.storeMarkedOffsets(into: client)
        if let error = client.closeConsumer() {
            logger.warning("consumer close reported an error", metadata: ["kafka.error": "\(error)"])
        }
        return nil
    }

    // MARK: Joining

    /// Subscribing makes librdkafka join the group, which needs this loop to answer rebalances:
    /// a member that joined without polling would hold partitions hostage.
    private func join(_ client: RDKafkaClient) throws(KafkaError) {
        switch configuration.membership {
        case .group:
            try client.subscribe(configuration.topics)
        case .replica:
            // No group, no rebalances: the whole topics, assigned once, from the start
            // (or, for a replaced handle, from where the old one stopped).
            let since = configuration.replicaSince.map { Int64(($0.timeIntervalSince1970 * 1_000).rounded(.down)) }
            core.didAssign(
                try client.assignReplica(
                    configuration.topics, partitions: configuration.replicaPartitions, sinceMilliseconds: since,
                    startOffsets: configuration.replicaStartOffsets ?? [:], resumeAt: positions))
        }
    }

    /// A new handle made with the current properties, joined as the first one was.
    private func joined() throws(KafkaError) -> RDKafkaClient {
        let client = try KafkaConsumer.makeClient(properties: properties, core: core, logger: logger)
        try join(client)
        return client
    }

    // MARK: Replacing the handle

    /// Replaces the handle, which librdkafka declared unusable (a fatal error: the member was
    /// fenced, say). A group member's partitions are given up as lost — nothing more is committed
    /// for them, their buffered messages are dropped and the caller gets
    /// ``KafkaConsumerEvent/partitionsRevoked(_:)`` — the old handle is destroyed without closing
    /// (it can neither commit nor leave the group), and a new one joins as a new member (a replica
    /// goes on after the last record it buffered), after a backoff when this is not the first
    /// replacement in a row (``ConsumerMachine/nextRecreation()``). `false` when the consumer was
    /// stopped meanwhile.
    private func replace(after reason: KafkaError) -> Bool {
        let attempt = core.beginRecovery(reason: reason)
        logger.error(
            "the Kafka consumer cannot go on: giving up its partitions and joining again with a new handle",
            metadata: ["kafka.error": "\(reason)", "kafka.recovery": "\(attempt)"])
        core.loseEverything()
        client.abandon()
        while case .make(let backoff) = core.nextRecreation() {
            if backoff > .zero && !core.sleep(backoff) { return false }
            do {
                use(try joined())
                core.recreated()
                logger.notice("the Kafka consumer was recreated", metadata: ["kafka.recovery": "\(attempt)"])
                return true
            } catch {
                logger.error("recreating the Kafka consumer failed", metadata: ["kafka.error": "\(error)"])
                core.recreationFailed()
            }
        }
        return false
    }

    /// Replaces a starved consumer's handle (``ConsumerMachine/fetchWaitAfterStarving(at:clusterAnswers:)``)
    /// by one fetching with `wait`: the old one commits what was marked and leaves (a group
    /// member's partitions are revoked as in any rebalance, and the group assigns them again; a
    /// replica goes on where it stopped). If the new handle cannot be made, the recovery after a
    /// fatal error takes over (with the longer wait). `false` when the consumer was stopped meanwhile.
    private func lengthenFetchWait(to wait: Duration) -> Bool {
        let milliseconds = Int(wait.librdkafkaMilliseconds)
        logger.warning(
            "the broker answers the consumer's fetches with nothing while it is behind: fetching with a longer wait from now on",
            metadata: ["kafka.fetch.wait.ms": "\(milliseconds)", "kafka.fetch.wait.ms.before": "\(Self.fetchWaitMilliseconds(properties))"])
        properties["fetch.wait.max.ms"] = "\(milliseconds)"
        core.storeMarkedOffsets(into: client)
        if let error = client.closeConsumer() {
            logger.warning("consumer close reported an error", metadata: ["kafka.error": "\(error)"])
        }
        core.useFetchWait(milliseconds: milliseconds, newHandle: true)
        do {
            use(try joined())
            return true
        } catch {
            return replace(after: error)
        }
    }

    private func use(_ client: RDKafkaClient) {
        self.client = client
        current.client = client
    }

    /// The `fetch.wait.max.ms` a handle made with `properties` fetches with (librdkafka's default: 500).
    static func fetchWaitMilliseconds(_ properties: [String: String]) -> Int {
        properties["fetch.wait.max.ms"].flatMap { Int($0) } ?? 500
    }
}
