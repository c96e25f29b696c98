import Foundation
import IsletKafka
import IsletMessages
import Synchronization

/// What the memory keeps of an activity's latest request (about 60 bytes): enough to tell whether
/// it is stale, whose answer an outcome is, and what to report; the rest (payload included) is
/// read again from `islet.push-requests.v1` when the monitor re-sends it.
public struct LatestRequest: Sendable, Equatable {
    private var id: PackedId
    private var created: Double
    private var stale: PackedDate
    /// The sequence of the event whose content it carries.
    public private(set) var contentSequence: Int64
    private var eventCode: UInt32
    private var appCode: UInt32
    private var typeCode: UInt32
    private var kind: UInt8

    private static let content: UInt8 = 1
    private static let pushToStart: UInt8 = 2
    private static let userStart: UInt8 = 4
    private static let absent: UInt8 = 128
    static let none = LatestRequest(
        id: .text(""), created: 0, stale: PackedDate(), contentSequence: 0, eventCode: 0, appCode: 0, typeCode: 0, kind: absent)

    private init(
        id: PackedId, created: Double, stale: PackedDate, contentSequence: Int64, eventCode: UInt32, appCode: UInt32, typeCode: UInt32, kind: UInt8
    ) {
        (self.id, self.created, self.stale, self.contentSequence) = (id, created, stale, contentSequence)
        (self.eventCode, self.appCode, self.typeCode, self.kind) = (eventCode, appCode, typeCode, kind)
    }

    init(_ request: PushRequest) {
        self.init(
            requestId: request.requestId, event: request.event, app: request.app, attributesType: request.attributesType,
            createdAt: request.createdAt, staleDate: request.staleDate, contentSequence: request.contentSequence,
            isContent: request.sourceEventId != nil, isPushToStart: request.pushToStartKey != nil,
            isUserStart: request.pushToStartKey != nil && request.startGroup != nil)
    }

    public init(
        requestId: String, event: ActivityEventKind, app: AppTarget, attributesType: String, createdAt: Date, staleDate: Date?,
        contentSequence: Int64, isContent: Bool, isPushToStart: Bool, isUserStart: Bool = false
    ) {
        self.init(
            id: PackedId(requestId), created: createdAt.timeIntervalSinceReferenceDate, stale: PackedDate(staleDate), contentSequence: contentSequence,
            eventCode: Interned.strings.code(event.rawValue), appCode: Interned.apps.code(app), typeCode: Interned.strings.code(attributesType),
            kind: (isContent ? Self.content : 0) | (isPushToStart ? Self.pushToStart : 0) | (isUserStart ? Self.userStart : 0))
    }

    var isNone: Bool { kind & Self.absent != 0 }
    public var requestId: String { id.text }
    /// Whether `requestId` is this request's (without making a string of its own).
    func isRequest(_ requestId: String) -> Bool { id == PackedId(requestId) }
    public var event: ActivityEventKind { ActivityEventKind(rawValue: Interned.strings.value(eventCode) ?? "") }
    public var app: AppTarget { Interned.apps.value(appCode) ?? AppTarget(bundleId: "", environment: .production) }
    public var attributesType: String { Interned.strings.value(typeCode) ?? "" }
    public var createdAt: Date { Date(timeIntervalSinceReferenceDate: created) }
    public var staleDate: Date? { stale.date }
    /// It carried an event's content (not a re-send or an end the monitor made).
    public var isContent: Bool { kind & Self.content != 0 }
    public var isPushToStart: Bool { kind & Self.pushToStart != 0 }
    /// A push-to-start to every device of a user (``PushRequest/startGroup``).
    public var isUserStart: Bool { kind & Self.userStart != 0 }
}
