import Foundation
import IsletKafka
import IsletMessages

/// What both backend APIs (gRPC and HTTP) do with an event a backend hands them: check it against
/// its template, publish it to `islet.activity-events.v1`, and answer with the ids of the push
/// requests it becomes.
///
/// The check assembles the event's requests (``ContentEngine/prepareAhead(_:partition:)``), which
/// are not sent yet: the instance owning the activity's partition sends them when it reads the
/// event, in order with the activity's other events. When that is this instance (a call about
/// another instance's activity is forwarded there when peers are configured) and nothing the
/// assembly read has changed by then, those requests are the ones sent; otherwise it assembles the
/// event again from what is true then. The check is against the activity's memory only when this
/// instance owns that partition. Request ids derive from the event id (``RequestIds``), so they are
/// known before the requests exist, and a call repeated with the same event id changes nothing.
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
        /// The event cannot be taken yet, and can be in a moment: a push-to-start of an activity
        /// sent by broadcast before the activity's start is read or its channel made.
        case notYet(field: String, problem: String)
    }

    /// The partition of `islet.activity-events.v1` an activity id is in (`nil`: not known yet).
    public typealias Partition = @Sendable (_ activityId: String) -> Int32?

    let engine: ContentEngine
    let publish: Publish
    let isReady: @Sendable () -> Bool
    let partition: Partition
    /// The partitions this instance owns now (it reads their events back).
    let owned: @Sendable () -> Set<Int32>

    public init(
        engine: ContentEngine, isReady: @escaping @Sendable () -> Bool = { true }, partition: @escaping Partition = { _ in nil },
        owned: @escaping @Sendable () -> Set<Int32> = { [] }, publish: @escaping Publish
    ) {
        self.engine = engine
        self.isReady = isReady
        self.partition = partition
        self.owned = owned
        self.publish = publish
    }

    public init(
        engine: ContentEngine, producer: KafkaProducer, topic: String = IsletTopics.activityEvents.name, isReady: @escaping @Sendable () -> Bool,
        lookup: ActivityLookup
    ) {
        self.init(engine: engine, isReady: isReady, partition: lookup.partition, owned: lookup.owned) { event in
            _ = try await producer.send(event, to: topic)
        }
    }

    /// Checks and publishes `event` (already valid as a message); returns its push requests' ids
    /// (none when the owner will ignore it: a sequence not above the activity's last).
    public func accept(_ given: ActivityEvent) async throws(Refusal) -> [String] {
        guard isReady() else { throw .starting }
        // The event as the owner will read it back (dates to the millisecond, numbers as JSON
        // spells them): what is checked, kept and published is that.
        let event = (try? IsletJSON.decode(ActivityEvent.self, from: IsletJSON.encode(given))) ?? given
        do {
            // Its times to the millisecond: still within its rules (a dismissal within 4 h of it).
            try event.validate()
        } catch {
            throw .invalid(field: error.field, problem: error.problem)
        }
        let partition = partition(event.activityId)
        let ownedNow = owned()
        let owns = partition.map(ownedNow.contains) ?? false
        let requestIds: [String]
        do {
            switch try engine.prepareAhead(event, partition: partition, keep: owns) {
            // (The activity's own requests: not the copies to its other devices, nor the widget
            // pushes to its user's devices, which go with them.)
            case .send(let prepared): requestIds = prepared.requests.filter { !$0.isDeviceCopy && !$0.isStartCopy && !$0.isWidget }.map(\.requestId)
            case .ignore: requestIds = []
            // Sent at its time: its requests' ids are not known yet.
            case .schedule: requestIds = []
            }
        } catch where PayloadAssembler.retryableChannelStarts.contains(error) {
            // Known only to the activity's owner (this instance's memory of it is the owner's
            // only when it owns the partition; the memory is checked before the token): an
            // instance that owns other partitions publishes it, and the owner decides when it
            // reads it. One that owns none yet (starting, or a rebalance under way) cannot tell:
            // retried, the call finds the owner.
            guard !owns, partition != nil, !ownedNow.isEmpty else { throw .notYet(field: error.field, problem: error.problem) }
            requestIds = []
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
