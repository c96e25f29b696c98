import Foundation
import IsletMessages
import IsletTokens
import Synchronization

/// Decides what each domain event becomes: ignored (a duplicate or out-of-order sequence, or an
/// activity that has ended), refused (it does not fit its template), or push requests for the app
/// version its token was registered with. The activity's memory moves on only once the requests
/// are persisted (``commit(_:)``): a failed send leaves the event to be handled again.
public final class ContentEngine: Sendable {
    public let assembler: PayloadAssembler
    private let tokens: TokenTable
    private let memories = Mutex<[String: ActivityMemory]>([:])
    private let now: @Sendable () -> Date

    public init(assembler: PayloadAssembler, tokens: TokenTable, now: @escaping @Sendable () -> Date = Date.init) {
        self.assembler = assembler
        self.tokens = tokens
        self.now = now
    }

    public enum Decision: Sendable {
        /// Send these, then ``commit(_:)`` the prepared memory.
        case send(Prepared)
        /// Nothing to send, and why (counted, and the event marked processed).
        case ignore(String)
    }

    /// Requests ready to be sent, and the activity's memory once they are.
    public struct Prepared: Sendable {
        public var requests: [PushRequest]
        public var shrinks: [String]
        let activityId: String
        let memory: ActivityMemory
    }

    /// An app version newer than any: when the activity's version is unknown every field is sent
    /// (extra fields are ignored by the app's decoder; a missing one would break it).
    static let newest = AppVersion("999999")!

    public func prepare(_ event: ActivityEvent) throws(ContentError) -> Decision {
        var memory = memories.withLock { $0[event.activityId] } ?? ActivityMemory()
        if let last = memory.lastSequence, event.sequence <= last {
            return .ignore(event.sequence == last ? "duplicate sequence \(event.sequence)" : "sequence \(event.sequence) is older than \(last)")
        }
        if memory.ended, event.kind != .start { return .ignore("the activity has ended") }
        guard let template = assembler.templates[event.attributesType] else {
            throw ContentError(field: "attributesType", problem: "\(event.attributesType) has no template")
        }
        // The token tells the app, its environment and its version; without one, the template's app.
        let key: String
        if let target = event.startTarget {
            key = MessageKey.pushToStart(bundleId: target.app.bundleId, deviceId: target.deviceId, attributesType: event.attributesType)
        } else {
            key = MessageKey.activity(event.activityId)
        }
        let record = tokens.record(forKey: key)
        guard let app = record?.app ?? event.startTarget?.app ?? template.app else {
            throw ContentError(field: "activityId", problem: "no token is registered for it, and template \(template.attributesType) names no app")
        }
        let version = record.flatMap { AppVersion($0.appVersion) } ?? Self.newest
        let result = try assembler.assemble(event, app: app, appVersion: version, memory: &memory, now: now())
        return .send(Prepared(requests: result.requests, shrinks: result.shrinks, activityId: event.activityId, memory: memory))
    }

    /// The prepared requests are persisted: the activity's memory moves on.
    public func commit(_ prepared: Prepared) {
        memories.withLock { $0[prepared.activityId] = prepared.memory }
    }

    /// Activities remembered.
    public var activityCount: Int { memories.withLock { $0.count } }
}
