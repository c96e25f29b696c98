import Foundation
import IsletMessages
import Logging
import ServiceLifecycle

/// Sends scheduled steps at their time (``ContentEngine/dueSteps(owned:)``): looks every `tick`
/// (a peek at the earliest step when none is due), and sends those due in the loop's whole turn,
/// so that a step never interleaves with an event of its activity. Each is prepared as the event
/// it is, at that moment (the token, app version and alert window of then), and sent as an
/// event's requests are; one that is not to be sent after all (superseded, the activity ended,
/// refused by its template now) is let go.
public struct StepSender: Service {
    let engine: ContentEngine
    let sender: RequestSender
    let logger: Logger
    /// How often it looks: a step goes out within this of its time (plus Kafka's and APNs's latency).
    let tick: Duration

    public init(engine: ContentEngine, sender: RequestSender, tick: Duration = .milliseconds(200), logger: Logger) {
        self.engine = engine
        self.sender = sender
        self.tick = tick
        self.logger = logger
    }

    public func run() async throws {
        while !Task.isCancelled {
            guard (try? await cancelWhenGracefulShutdown { try await Task.sleep(for: tick) }) != nil else { return }
            try await send()
        }
    }

    /// Sends the steps due now (tests call it with a manual clock); returns their requests.
    @discardableResult
    public func send() async throws -> [PushRequest] {
        guard let due = engine.nextStepDue, due <= engine.clock.date else { return [] }
        let (engine, sender, logger, metrics) = (self.engine, self.sender, self.logger, self.sender.metrics)
        return try await sender.turn { () async throws -> [PushRequest] in
            try await sender.repair()
            var sent: [PushRequest] = []
            for step in engine.dueSteps(owned: sender.ownedPartitions) {
                let why: String
                let decision: ContentEngine.Decision
                do {
                    decision = try engine.prepare(step.event, partition: step.partition, firing: true)
                } catch {
                    decision = .ignore("refused at its time: \(error)")
                }
                switch decision {
                case .send(let prepared):
                    metrics.stepSent()
                    try await sender.enqueue(prepared) {}
                    sent += prepared.requests
                    logger.debug("scheduled step sent", metadata: ["activity.key": "\(step.activityKey)", "event.sequence": "\(step.event.sequence)"])
                    continue
                case .ignore(let reason): why = reason
                case .schedule: why = "scheduled again"
                }
                metrics.stepDropped()
                engine.dropStep(step)
                logger.info("scheduled step not sent", metadata: ["activity.key": "\(step.activityKey)", "event.sequence": "\(step.event.sequence)", "why": "\(why)"])
            }
            return sent
        }
    }
}
