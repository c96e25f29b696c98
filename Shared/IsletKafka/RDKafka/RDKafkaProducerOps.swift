import CRdKafka

extension RDKafkaClient {
    /// Enqueues one record (copied) without blocking; its delivery report calls `delivery`.
    /// Returns the error when librdkafka refused the record (then `delivery` is never called).
    ///
    /// Uses `rd_kafka_produceva`, whose `rd_kafka_error_t` result is thread-safe (unlike
    /// `rd_kafka_last_error()`, which is per thread).
    func produce(
        topic: String, partition: Int32?, key: [UInt8]?, value: [UInt8]?, headers: [KafkaHeader], delivery: RDKafkaDelivery
    ) -> KafkaError? {
        guard let rkt = topicHandle(topic) else {
            return KafkaError(code: .produce, message: "cannot create a topic handle for \(topic)")
        }
        var cHeaders: OpaquePointer?
        if !headers.isEmpty {
            cHeaders = rd_kafka_headers_new(headers.count)
            for header in headers {
                if let bytes = header.value {
                    bytes.withUnsafeBytes { raw in
                        _ = rd_kafka_header_add(cHeaders, header.name, -1, raw.baseAddress, raw.count)
                    }
                } else {
                    _ = rd_kafka_header_add(cHeaders, header.name, -1, nil, 0)
                }
            }
        }

        let opaque = Unmanaged.passRetained(delivery).toOpaque()
        let error: OpaquePointer? = withOptionalBytes(value) { valuePointer, valueCount in
            withOptionalBytes(key) { keyPointer, keyCount in
                withUnsafeTemporaryAllocation(of: rd_kafka_vu_t.self, capacity: 7) { vus in
                vus.initialize(repeating: rd_kafka_vu_t())
                vus[0].vtype = RD_KAFKA_VTYPE_RKT
                vus[0].u.rkt = rkt
                vus[1].vtype = RD_KAFKA_VTYPE_PARTITION
                vus[1].u.i32 = partition ?? RDKafkaConstants.partitionUnassigned
                vus[2].vtype = RD_KAFKA_VTYPE_VALUE
                vus[2].u.mem.ptr = valuePointer.map { UnsafeMutableRawPointer(mutating: $0) }
                vus[2].u.mem.size = valueCount
                vus[3].vtype = RD_KAFKA_VTYPE_MSGFLAGS
                vus[3].u.i = RDKafkaConstants.messageFlagCopy
                vus[4].vtype = RD_KAFKA_VTYPE_OPAQUE
                vus[4].u.ptr = opaque
                var count = 5
                if key != nil {
                    vus[count].vtype = RD_KAFKA_VTYPE_KEY
                    vus[count].u.mem.ptr = keyPointer.map { UnsafeMutableRawPointer(mutating: $0) }
                    vus[count].u.mem.size = keyCount
                    count += 1
                }
                if let cHeaders {
                    vus[count].vtype = RD_KAFKA_VTYPE_HEADERS
                    vus[count].u.headers = cHeaders
                    count += 1
                }
                return rd_kafka_produceva(handle, vus.baseAddress, count)
                }
            }
        }
        guard let error else { return nil }  // librdkafka owns the headers and the opaque now
        Unmanaged<RDKafkaDelivery>.fromOpaque(opaque).release()
        if let cHeaders { rd_kafka_headers_destroy(cHeaders) }
        return KafkaError(code: .produce, consuming: error, context: "produce to \(topic)")
    }

    /// Whether a produce error means "librdkafka's queue is full, wait and retry".
    static func isQueueFull(_ error: KafkaError) -> Bool {
        error.librdkafkaCode == RD_KAFKA_RESP_ERR__QUEUE_FULL.rawValue
    }

    /// Waits up to the timeout for all records to be delivered (serving delivery reports). Blocking.
    func flush(timeoutMilliseconds: Int32) -> Bool {
        rd_kafka_flush(handle, timeoutMilliseconds) == RD_KAFKA_RESP_ERR_NO_ERROR
    }

    /// Fails every queued and in-flight record and serves the delivery reports that follow (at
    /// most `limit`), so that each sender gets its verdict. Returns how many records are still
    /// unreported (0 normally).
    func purgeAndServeReports(within limit: Duration) -> Int32 {
        Self.purgeAndServeReports(handle, within: limit)
    }

    /// ``purgeAndServeReports(within:)`` on a bare producer handle (also one being destroyed).
    static func purgeAndServeReports(_ handle: OpaquePointer, within limit: Duration) -> Int32 {
        _ = rd_kafka_purge(handle, RDKafkaConstants.purgeQueue | RDKafkaConstants.purgeInFlight)
        // librdkafka reports every purged record (_PURGE_QUEUE, _PURGE_INFLIGHT): serve those reports.
        let deadline = ContinuousClock.now + limit
        while rd_kafka_outq_len(handle) > 0 && ContinuousClock.now < deadline {
            rd_kafka_poll(handle, 100)
        }
        return rd_kafka_outq_len(handle)
    }
}

private func withOptionalBytes<R>(_ bytes: [UInt8]?, _ body: (UnsafeRawPointer?, Int) -> R) -> R {
    guard let bytes else { return body(nil, 0) }
    return bytes.withUnsafeBytes { raw in
        // An empty array may have no base address; librdkafka wants a non-NULL pointer for "empty".
        if raw.count == 0 {
            var zero: UInt8 = 0
            return withUnsafePointer(to: &zero) { body(UnsafeRawPointer($0), 0) }
        }
        return body(raw.baseAddress, raw.count)
    }
}
