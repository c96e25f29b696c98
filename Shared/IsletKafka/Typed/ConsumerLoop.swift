import IsletMessages

extension MessageSource {
    /// The consumer loop of a service that handles records one at a time: serves the source, hands
    /// each record to `handle` in partition order, and marks it processed once `handle` returns —
    /// or, when `handle` refuses it, once it is persisted on the dead-letter topic (nothing is
    /// skipped silently). Returns when the source shuts down; throws what `handle` throws.
    public func consumeRecords(
        deadLetters: DeadLetterWriter, onAssigned: ([KafkaTopicPartition]) -> Void = { _ in },
        handle: (KafkaMessage) async throws -> Result<Void, DeadLetterWriter.Rejection>
    ) async throws {
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await self.run() }
            for await event in events {
                switch event {
                case .partitionsAssigned(let partitions):
                    onAssigned(partitions)
                case .message(let raw):
                    switch try await handle(raw) {
                    case .success: markProcessed(raw)
                    case .failure(let rejection): try await deadLetters.deadLetter(raw, reason: rejection.reason, detail: rejection.detail)
                    }
                case .partitionEnd, .partitionsRevoked:
                    continue
                }
            }
            // The events end when the source stops; make sure its run() does too.
            shutdown()
        }
    }

    /// ``consumeRecords(deadLetters:onAssigned:handle:)`` for one message type: each record decoded
    /// and validated as `Message` (one that is not goes to the dead-letter topic with the reason;
    /// a tombstone is passed over), then handled.
    public func consume<Message: IsletMessage>(
        _ type: Message.Type, deadLetters: DeadLetterWriter, onAssigned: ([KafkaTopicPartition]) -> Void = { _ in },
        handle: (Message) async throws -> Void
    ) async throws {
        try await consumeRecords(deadLetters: deadLetters, onAssigned: onAssigned) { raw in
            guard raw.value != nil else { return .success(()) }
            switch DeadLetterWriter.check(type, raw) {
            case .success(let message):
                try await handle(message)
                return .success(())
            case .failure(let rejection):
                return .failure(rejection)
            }
        }
    }
}
