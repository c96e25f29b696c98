// Every C pointer of the Kafka wrapper lives in this folder (Shared/IsletKafka/RDKafka/).
// Code outside it sees Swift types only.
import CRdKafka
import Foundation
import Logging
import Synchronization

/// Owns one `rd_kafka_t`.
///
/// `@unchecked Sendable`: librdkafka documents `rd_kafka_t` as thread-safe; the only mutable Swift
/// state (the topic handle cache) is behind a `Mutex`.
final class RDKafkaClient: @unchecked Sendable {
    enum Kind { case producer, consumer }

    let kind: Kind
    let handle: OpaquePointer
    /// The consumer queue (`rd_kafka_queue_get_consumer`), consumers only.
    let consumerQueue: OpaquePointer?
    /// The main queue (`rd_kafka_queue_get_main`), producers only: what `rd_kafka_poll` waits on.
    private let mainQueue: OpaquePointer?
    private let context: Unmanaged<CallbackContext>
    private let topicHandles = Mutex<[String: RDKafkaTopicHandle]>([:])
    /// Set once the handle was destroyed by ``abandon()`` (tests): nothing may touch it again.
    private let abandoned = Atomic<Bool>(false)
    /// Calls from other threads inside librdkafka now (probes, wake-ups): ``abandon()`` waits for
    /// them before it destroys the handle.
    private let borrowers = Atomic<Int>(0)

    /// Runs `body` unless the handle was destroyed (then `nil`), and keeps ``abandon()`` from
    /// destroying it meanwhile. For calls from threads other than the one that may abandon it.
    func borrowing<T, Failure: Error>(_ body: () throws(Failure) -> T) throws(Failure) -> T? {
        // Counted before the check, and abandon() sets its flag before it reads the count: either
        // this call sees the flag, or abandon() waits for it.
        borrowers.add(1, ordering: .sequentiallyConsistent)
        defer { borrowers.subtract(1, ordering: .sequentiallyConsistent) }
        guard !abandoned.load(ordering: .sequentiallyConsistent) else { return nil }
        return try body()
    }

    /// Keeps the callbacks alive for as long as librdkafka may call them.
    final class CallbackContext: Sendable {
        let callbacks: RDKafkaCallbacks
        init(_ callbacks: RDKafkaCallbacks) { self.callbacks = callbacks }
    }

    init(kind: Kind, properties: [String: String], callbacks: RDKafkaCallbacks) throws(KafkaError) {
        self.kind = kind
        let conf = rd_kafka_conf_new()!
        var errstr = [CChar](repeating: 0, count: 512)
        for (key, value) in properties.sorted(by: { $0.key < $1.key }) {
            let result = rd_kafka_conf_set(conf, key, value, &errstr, errstr.count)
            if result != RD_KAFKA_CONF_OK {
                rd_kafka_conf_destroy(conf)
                throw KafkaError(code: .configuration, message: "\(key): \(cBufferString(errstr))")
            }
        }
        let context = Unmanaged.passRetained(CallbackContext(callbacks))
        rd_kafka_conf_set_opaque(conf, context.toOpaque())
        rd_kafka_conf_set_log_cb(conf, rdkafkaLogCallback)
        rd_kafka_conf_set_error_cb(conf, rdkafkaErrorCallback)
        if callbacks.onDelivery != nil {
            rd_kafka_conf_set_dr_msg_cb(conf, rdkafkaDeliveryCallback)
        }
        if callbacks.rebalance != nil {
            rd_kafka_conf_set_rebalance_cb(conf, rdkafkaRebalanceCallback)
        }
        if callbacks.onStatistics != nil {
            rd_kafka_conf_set_stats_cb(conf, rdkafkaStatisticsCallback)
        }
        if kind == .producer, callbacks.hashedKeyRange != nil {
            // Every topic of this producer partitions by the part of the key the caller names.
            let topicConf: OpaquePointer
            if let existing = rd_kafka_conf_get_default_topic_conf(conf) {
                topicConf = existing
            } else {
                topicConf = rd_kafka_topic_conf_new()
                rd_kafka_conf_set_default_topic_conf(conf, topicConf)
            }
            // The partitioner finds the callbacks through the topics' opaque (copied to each topic).
            rd_kafka_topic_conf_set_opaque(topicConf, context.toOpaque())
            rd_kafka_topic_conf_set_partitioner_cb(topicConf, rdkafkaKeyPartitioner)
        }

        // On success rd_kafka_new takes ownership of conf; on failure it is ours to destroy.
        guard let handle = rd_kafka_new(kind == .producer ? RD_KAFKA_PRODUCER : RD_KAFKA_CONSUMER, conf, &errstr, errstr.count)
        else {
            rd_kafka_conf_destroy(conf)
            context.release()
            throw KafkaError(code: .configuration, message: cBufferString(errstr))
        }
        self.handle = handle
        self.context = context
        if kind == .consumer {
            rd_kafka_poll_set_consumer(handle)
            self.consumerQueue = rd_kafka_queue_get_consumer(handle)
            self.mainQueue = nil
        } else {
            self.consumerQueue = nil
            self.mainQueue = rd_kafka_queue_get_main(handle)
        }
    }

    deinit {
        guard !abandoned.load(ordering: .acquiring) else { return }
        let topics = topicHandles.withLock { handles in
            defer { handles.removeAll() }
            return Array(handles.values)
        }
        // rd_kafka_destroy joins librdkafka's threads; it runs on a thread of its own so that a
        // deinit on Swift's cooperative pool never blocks. The poll loop already flushed or closed.
        let doomed = RDKafkaDoomedHandle(
            handle: handle, queues: [consumerQueue, mainQueue].compactMap { $0 }, topics: topics, context: context, kind: kind)
        let thread = Thread { doomed.destroy() }
        thread.name = "islet-kafka-destroy"
        thread.start()
    }

    /// librdkafka's version, e.g. "2.8.0".
    static var librdkafkaVersion: String { String(cString: rd_kafka_version_str()) }

    // MARK: Polling

    /// Serves delivery reports and errors; blocks up to `timeoutMilliseconds`. Poll thread only.
    @discardableResult
    func poll(timeoutMilliseconds: Int32) -> Int32 {
        rd_kafka_poll(handle, timeoutMilliseconds)
    }

    /// Wakes a blocked ``poll(timeoutMilliseconds:)`` or consumer-queue wait, from any thread.
    func wakeUp() {
        guard let queue = consumerQueue ?? mainQueue else { return }
        _ = borrowing { rd_kafka_queue_yield(queue) }
    }

    /// Whether ``abandon()`` destroyed the handle (then nothing may touch it).
    var isAbandoned: Bool { abandoned.load(ordering: .acquiring) }

    /// Records waiting in librdkafka (queued or in flight).
    var outstandingCount: Int32 { rd_kafka_outq_len(handle) }

    /// Asks the cluster for metadata (of the topics the client knows): `true` when a broker answered
    /// within the timeout. Blocking: how a client that has nothing else to do learns that the
    /// cluster still answers.
    func probe(timeoutMilliseconds: Int32) -> Bool {
        borrowing { () -> Bool in
            var metadata: UnsafePointer<rd_kafka_metadata>?
            let result = rd_kafka_metadata(handle, 0, nil, &metadata, timeoutMilliseconds)
            if let metadata { rd_kafka_metadata_destroy(metadata) }
            return result == RD_KAFKA_RESP_ERR_NO_ERROR
        } ?? false
    }

    /// The fatal error librdkafka raised, if any.
    func fatalError() -> KafkaError? {
        var buffer = [CChar](repeating: 0, count: 512)
        let code = rd_kafka_fatal_error(handle, &buffer, buffer.count)
        guard code != RD_KAFKA_RESP_ERR_NO_ERROR else { return nil }
        return KafkaError(
            code: .fatal, message: cBufferString(buffer), librdkafkaCode: code.rawValue,
            librdkafkaName: String(cString: rd_kafka_err2name(code)), isFatal: true)
    }

    // MARK: Topic handles

    /// A cached `rd_kafka_topic_t` for producing to `name`.
    func topicHandle(_ name: String) -> OpaquePointer? {
        if let cached = topicHandles.withLock({ $0[name] }) { return cached.pointer }
        guard let created = rd_kafka_topic_new(handle, name, nil) else { return nil }
        let winner = topicHandles.withLock { handles -> RDKafkaTopicHandle? in
            if let existing = handles[name] { return existing }
            handles[name] = RDKafkaTopicHandle(pointer: created)
            return nil
        }
        if let winner {
            rd_kafka_topic_destroy(created)
            return winner.pointer
        }
        return created
    }

    // MARK: Test support

    /// Raises a fabricated fatal error (librdkafka's `rd_kafka_test_fatal_error`), as if the
    /// idempotent producer had lost its guarantees. Tests only.
    func raiseFatalErrorForTesting(reason: String) {
        _ = borrowing { rd_kafka_test_fatal_error(handle, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER, reason) }
    }

    /// Destroys the handle without closing the consumer (no commit, no LeaveGroup): what a
    /// process killed with SIGKILL leaves behind. Tests only; the client is unusable afterwards.
    /// Blocking: waits for calls from other threads under way (a probe: at most its timeout) and joins librdkafka's threads.
    func abandon() {
        guard !abandoned.exchange(true, ordering: .sequentiallyConsistent) else { return }
        while borrowers.load(ordering: .sequentiallyConsistent) > 0 { usleep(1_000) }
        let topics = topicHandles.withLock { handles in
            defer { handles.removeAll() }
            return Array(handles.values)
        }
        for topic in topics { rd_kafka_topic_destroy(topic.pointer) }
        if let consumerQueue { rd_kafka_queue_destroy(consumerQueue) }
        if let mainQueue { rd_kafka_queue_destroy(mainQueue) }
        rd_kafka_destroy_flags(handle, RDKafkaConstants.destroyWithoutConsumerClose)
        context.release()
    }
}

/// An `rd_kafka_topic_t` pointer (thread-safe per librdkafka).
struct RDKafkaTopicHandle: @unchecked Sendable {
    let pointer: OpaquePointer
}

/// What deinit hands to the destroying thread. `@unchecked Sendable`: used by that thread alone.
private struct RDKafkaDoomedHandle: @unchecked Sendable {
    let handle: OpaquePointer
    let queues: [OpaquePointer]
    let topics: [RDKafkaTopicHandle]
    let context: Unmanaged<RDKafkaClient.CallbackContext>
    let kind: RDKafkaClient.Kind

    func destroy() {
        if kind == .producer {
            // A producer that was never run (or not to the end) may still hold records: purge them
            // and serve their reports, so that every sender gets its verdict before the handle goes.
            _ = RDKafkaClient.purgeAndServeReports(handle, within: .seconds(10))
        }
        for topic in topics { rd_kafka_topic_destroy(topic.pointer) }
        for queue in queues { rd_kafka_queue_destroy(queue) }
        rd_kafka_destroy(handle)
        context.release()
    }
}

/// The NUL-terminated text librdkafka wrote into an error buffer.
func cBufferString(_ buffer: [CChar]) -> String {
    buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

// MARK: - Errors

extension KafkaError {
    /// The cluster refused the client's login (`RD_KAFKA_RESP_ERR__AUTHENTICATION`).
    var isAuthenticationFailure: Bool { librdkafkaCode == RD_KAFKA_RESP_ERR__AUTHENTICATION.rawValue }

    /// A `KafkaError` for a librdkafka response code.
    init(code: Code, _ err: rd_kafka_resp_err_t, context: String? = nil) {
        let text = String(cString: rd_kafka_err2str(err))
        self.init(
            code: code, message: context.map { "\($0): \(text)" } ?? text, librdkafkaCode: err.rawValue,
            librdkafkaName: String(cString: rd_kafka_err2name(err)), isRetriable: rdkafkaIsRetriable(err),
            isFatal: err == RD_KAFKA_RESP_ERR__FATAL)
    }

    /// Takes ownership of an `rd_kafka_error_t` and destroys it.
    init(code: Code, consuming error: OpaquePointer, context: String? = nil) {
        let err = rd_kafka_error_code(error)
        let text = String(cString: rd_kafka_error_string(error))
        self.init(
            code: code, message: context.map { "\($0): \(text)" } ?? text, librdkafkaCode: err.rawValue,
            librdkafkaName: String(cString: rd_kafka_error_name(error)),
            isRetriable: rd_kafka_error_is_retriable(error) != 0, isFatal: rd_kafka_error_is_fatal(error) != 0)
        rd_kafka_error_destroy(error)
    }
}

/// Transient conditions worth retrying (librdkafka retries them internally too).
private func rdkafkaIsRetriable(_ err: rd_kafka_resp_err_t) -> Bool {
    switch err {
    case RD_KAFKA_RESP_ERR__QUEUE_FULL, RD_KAFKA_RESP_ERR__MSG_TIMED_OUT, RD_KAFKA_RESP_ERR__TIMED_OUT,
        RD_KAFKA_RESP_ERR__TRANSPORT, RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN, RD_KAFKA_RESP_ERR_REQUEST_TIMED_OUT,
        RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION, RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE,
        RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS, RD_KAFKA_RESP_ERR_NOT_ENOUGH_REPLICAS_AFTER_APPEND,
        RD_KAFKA_RESP_ERR_NETWORK_EXCEPTION, RD_KAFKA_RESP_ERR_COORDINATOR_NOT_AVAILABLE,
        RD_KAFKA_RESP_ERR_NOT_COORDINATOR, RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART, RD_KAFKA_RESP_ERR__PURGE_QUEUE,
        RD_KAFKA_RESP_ERR__PURGE_INFLIGHT:
        return true
    default:
        return false
    }
}

// MARK: - C callbacks (no captures: the client's context arrives as librdkafka's opaque)

private func callbacks(from opaque: UnsafeMutableRawPointer?) -> RDKafkaCallbacks? {
    context(from: opaque)?.callbacks
}

/// The client's context, without copying its callbacks (the delivery path runs once per record).
private func context(from opaque: UnsafeMutableRawPointer?) -> RDKafkaClient.CallbackContext? {
    guard let opaque else { return nil }
    return Unmanaged<RDKafkaClient.CallbackContext>.fromOpaque(opaque).takeUnretainedValue()
}

private let rdkafkaLogCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafePointer<CChar>?) -> Void = {
    rk, level, facility, text in
    guard let rk, let callbacks = callbacks(from: rd_kafka_opaque(rk)) else { return }
    let facility = facility.map { String(cString: $0) } ?? "-"
    let message = text.map { String(cString: $0) } ?? ""
    // syslog levels: 0 emerg … 3 err, 4 warning, 5 notice, 6 info, 7 debug.
    let logLevel: Logger.Level =
        switch level {
        case ...3: .error
        case 4: .warning
        case 5: .notice
        case 6: .info
        default: .debug
        }
    callbacks.logger.log(
        level: logLevel, "\(message)", metadata: ["kafka.facility": "\(facility)", "kafka.client": "\(String(cString: rd_kafka_name(rk)))"])
}

/// Returns 0: librdkafka frees the JSON.
private let rdkafkaStatisticsCallback: @convention(c) (OpaquePointer?, UnsafeMutablePointer<CChar>?, Int, UnsafeMutableRawPointer?) -> Int32 = {
    _, json, length, opaque in
    guard let json, let onStatistics = context(from: opaque)?.callbacks.onStatistics else { return 0 }
    let bytes = UnsafeRawBufferPointer(start: json, count: length)
    onStatistics(String(decoding: bytes, as: UTF8.self))
    return 0
}

/// murmur2 (the Java client's: a record keyed `order-42` goes where any Kafka client puts it)
/// over the part of the key ``RDKafkaCallbacks/hashedKeyRange`` names. A record without a key gets a random partition.
private let rdkafkaKeyPartitioner:
    @convention(c) (OpaquePointer?, UnsafeRawPointer?, Int, Int32, UnsafeMutableRawPointer?, UnsafeMutableRawPointer?) -> Int32 = {
        topic, key, length, partitions, topicOpaque, messageOpaque in
        guard let key, let hashedKeyRange = context(from: topicOpaque)?.callbacks.hashedKeyRange else {
            return rd_kafka_msg_partitioner_murmur2_random(topic, nil, 0, partitions, topicOpaque, messageOpaque)
        }
        let bytes = UnsafeRawBufferPointer(start: key, count: length)
        return RDKafkaPartitioner.murmur2(bytes, in: hashedKeyRange(bytes), partitions: partitions)
    }

private let rdkafkaErrorCallback: @convention(c) (OpaquePointer?, Int32, UnsafePointer<CChar>?, UnsafeMutableRawPointer?) -> Void = {
    rk, code, reason, opaque in
    guard let rk, let callbacks = callbacks(from: opaque) else { return }
    let err = rd_kafka_resp_err_t(rawValue: code)
    let reason = reason.map { String(cString: $0) } ?? ""
    if err == RD_KAFKA_RESP_ERR__FATAL {
        var buffer = [CChar](repeating: 0, count: 512)
        let original = rd_kafka_fatal_error(rk, &buffer, buffer.count)
        let error = KafkaError(
            code: .fatal, message: cBufferString(buffer), librdkafkaCode: original.rawValue,
            librdkafkaName: String(cString: rd_kafka_err2name(original)), isFatal: true)
        callbacks.onError?(error)
    } else {
        callbacks.onError?(KafkaError(code: .client, err, context: reason))
    }
}

private let rdkafkaDeliveryCallback: @convention(c) (OpaquePointer?, UnsafePointer<rd_kafka_message_t>?, UnsafeMutableRawPointer?) -> Void = {
    _, message, opaque in
    guard let message, let record = message.pointee._private else { return }
    // The record's handler was retained when it was produced; this report is its one release.
    let delivery = Unmanaged<RDKafkaDelivery>.fromOpaque(record).takeRetainedValue()
    if message.pointee.err == RD_KAFKA_RESP_ERR_NO_ERROR {
        let offset = message.pointee.offset
        context(from: opaque)?.callbacks.onDelivery?(nil)
        delivery.handler(.success(KafkaDeliveryReport(topic: delivery.topic, partition: message.pointee.partition, offset: offset >= 0 ? offset : nil)))
    } else {
        let error = KafkaError(code: .delivery, message.pointee.err, context: "record to \(delivery.topic) not persisted")
        context(from: opaque)?.callbacks.onDelivery?(error)
        delivery.handler(.failure(error))
    }
}

private let rdkafkaRebalanceCallback: @convention(c) (OpaquePointer?, rd_kafka_resp_err_t, UnsafeMutablePointer<rd_kafka_topic_partition_list_t>?, UnsafeMutableRawPointer?) -> Void = {
    rk, err, partitions, opaque in
    guard let rk, let callbacks = callbacks(from: opaque), let hooks = callbacks.rebalance else { return }
    RDKafkaRebalance.handle(rk: rk, err: err, partitions: partitions, hooks: hooks, logger: callbacks.logger)
}
