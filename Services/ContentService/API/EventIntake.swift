import Foundation
import IsletKafka
import IsletMessages

/// What both backend APIs (gRPC and HTTP) do with an event a backend hands them: check it against
/// its template, publish it to `islet.activity-events.v1`, and answer with the ids of the push
/// requests it becomes.
///
/// The check is a dry run: the requests are made but not kept, and the instance owning the
/// activity's partition makes them again when it reads the event, in order with the activity's
/// other events. It is against the activity's memory only when this instance owns that partition.
/// Request ids derive from the event id (``RequestIds``), so they are known before the requests
/// exist, and a call repeated with the same event id changes nothing.
public struct EventIntake: Sendable {
    /// Where the events go; throws when they are not acknowledged.
    public typealias Publish = @Sendable (ActivityEvent) async throws -> Void

    /// Why an event was not taken. Nothing was published.
    public enum Refusal: Error, Sendable {
        /// The token table or the activity memory is still being read.
        case starting
        /// The event breaks a rule of its template (`field`: the event's field at fault).
        case invalid(field: String, problem: String)
        /// Kafka did not acknowledge the event: retry with the same event id.
        case notAcknowledged(String)
    }

    let engine: ContentEngine
    let publish: Publish
    let isReady: @Sendable () -> Bool

    public init(engine: ContentEngine, isReady: @escaping @Sendable () -> Bool = { true }, publish: @escaping Publish) {
        self.engine = engine
        self.isReady = isReady
        self.publish = publish
    }

    public init(engine: ContentEngine, producer: KafkaProducer, topic: String = IsletTopics.activityEvents.name, isReady: @escaping @Sendable () -> Bool) {
        self.init(engine: engine, isReady: isReady) { event in _ = try await producer.send(event, to: topic) }
    }

    /// Checks and publishes `event` (already valid as a message); returns its push requests' ids
    /// (none when the owner will ignore it: a sequence not above the activity's last).
    public func accept(_ event: ActivityEvent) async throws(Refusal) -> [String] {
        guard isReady() else { throw .starting }
        let requestIds: [String]
        do {
            switch try engine.prepare(event) {
            case .send(let prepared): requestIds = prepared.requests.map(\.requestId)
            case .ignore: requestIds = []
            }
        } catch {
            throw .invalid(field: error.field, problem: error.problem)
        }
        do {
            try await publish(event)
        } catch {
            throw .notAcknowledged("\(error)")
        }
        return requestIds
    }
}
