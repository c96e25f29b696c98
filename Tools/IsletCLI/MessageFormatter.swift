import Foundation
import IsletKafka
import IsletMessages

/// One readable line per record of an Islet topic.
///
/// Push tokens are credentials: a line shows a token's fingerprint (the first 16 hex digits of its
/// SHA-256, as logs and outcomes do), never the token. A dead letter shows why and where from, not
/// the original bytes (they may hold a token). Undecodable records show the decoding error only.
enum MessageFormatter {
    static func line(for message: KafkaMessage, topic: IsletTopic) -> String {
        let time = message.timestampMilliseconds.map { IsletDate.format(Date(timeIntervalSince1970: Double($0) / 1_000)) } ?? "-"
        let position = "\(message.partition)@\(message.offset)"
        return "\(time) \(position) \(body(for: message, topic: topic))"
    }

    static func body(for message: KafkaMessage, topic: IsletTopic) -> String {
        guard let value = message.value else {
            return "tombstone key=\(message.keyString ?? "-")"
        }
        do {
            switch topic.name {
            case IsletTopics.tokens.name: return describe(try IsletJSON.decode(TokenRecord.self, from: value))
            case IsletTopics.activityEvents.name: return describe(try IsletJSON.decode(ActivityEvent.self, from: value))
            case IsletTopics.pushRequests.name: return describe(try IsletJSON.decode(PushRequest.self, from: value))
            case IsletTopics.pushOutcomes.name: return describe(try IsletJSON.decode(PushOutcome.self, from: value))
            case IsletTopics.clicks.name: return describe(try IsletJSON.decode(ClickEvent.self, from: value))
            case IsletTopics.clicksRejected.name: return describe(try IsletJSON.decode(RejectedClick.self, from: value))
            case IsletTopics.deadLetters.name: return describe(try IsletJSON.decode(DeadLetterRecord.self, from: value))
            default: return "\(value.count) bytes key=\(message.keyString ?? "-")"
            }
        } catch {
            return "undecodable key=\(message.keyString ?? "-") (\(value.count) bytes): \(error)"
        }
    }

    static func describe(_ record: TokenRecord) -> String {
        var parts = ["TokenRecord", record.kind.rawValue, record.key ?? "-", "state=\(record.state)"]
        if let invalidation = record.invalidation { parts.append("reason=\(invalidation.reason)") }
        parts += [
            "token=\(TokenFingerprint.of(token: record.token))", "app=\(record.app.bundleId)/\(record.app.environment)",
            "type=\(record.attributesType)", "frequent=\(record.frequentUpdatesEnabled)", "version=\(record.appVersion)",
            "user=\(record.userId)", "registered=\(IsletDate.format(record.registeredAt))",
        ]
        return parts.joined(separator: " ")
    }

    static func describe(_ event: ActivityEvent) -> String {
        var parts = [
            "ActivityEvent", event.kind.rawValue, event.activityId, event.attributesType, "seq=\(event.sequence)",
            "urgency=\(event.urgency)", "event=\(event.eventId)",
        ]
        if let target = event.startTarget {
            parts.append("pushToStart=\(target.app.bundleId)/" + (target.deviceId ?? "user:\(target.userId ?? "")"))
        }
        if let source = event.source { parts.append("source=\(source)") }
        parts.append("fields=\(compactJSON(event.fields))")
        return parts.joined(separator: " ")
    }

    static func describe(_ request: PushRequest) -> String {
        var parts = [
            "PushRequest", request.event.rawValue, request.key ?? "-", request.attributesType, "id=\(request.requestId)",
            "priority=\(request.priority)", "urgency=\(request.urgency)", "seq=\(request.contentSequence)",
        ]
        if let state = request.state { parts.append("state=\(state)") }
        parts.append("payload=\(request.payload.utf8.count)B")
        if request.alerting { parts.append("alerting") }
        if let stale = request.staleDate { parts.append("stale=\(IsletDate.format(stale))") }
        return parts.joined(separator: " ")
    }

    static func describe(_ outcome: PushOutcome) -> String {
        var parts = ["PushOutcome", outcome.result.rawValue, outcome.key ?? "-", "request=\(outcome.requestId)"]
        if let apns = outcome.apns { parts.append("apns=\(apns.status)" + (apns.reason.map { "/\($0)" } ?? "")) }
        // The delivery log's key in Apple's Push Notifications Console, when APNs gave one.
        if let unique = outcome.apns?.uniqueId { parts.append("apnsUniqueId=\(unique)") }
        if let priority = outcome.priorityUsed { parts.append("priority=\(priority)") }
        parts.append("attempts=\(outcome.attempts)")
        if let latency = outcome.latencyMilliseconds { parts.append(String(format: "latency=%.1fms", latency)) }
        if let fingerprint = outcome.tokenFingerprint { parts.append("token=\(fingerprint)") }
        if let superseded = outcome.supersededBy { parts.append("supersededBy=\(superseded)") }
        if let detail = outcome.detail { parts.append("detail=\(quoted(detail))") }
        return parts.joined(separator: " ")
    }

    static func describe(_ click: ClickEvent) -> String {
        [
            "ClickEvent", click.activityId, click.attributesType, "surface=\(click.surface)", "element=\(click.element)",
            "seq=\(click.contentSequence)", "version=\(click.appVersion)", "tapped=\(IsletDate.format(click.tappedAt))",
            "click=\(click.clickId)",
        ].joined(separator: " ")
    }

    static func describe(_ rejected: RejectedClick) -> String {
        ["RejectedClick", "reason=\(rejected.reason)", "detail=\(quoted(rejected.detail))", "url=\(quoted(rejected.url))"].joined(separator: " ")
    }

    static func describe(_ letter: DeadLetterRecord) -> String {
        [
            "DeadLetter", "reason=\(letter.reason)", "service=\(letter.service)",
            "from=\(letter.origin.topic)[\(letter.origin.partition)]@\(letter.origin.offset)", "key=\(letter.originalKey ?? "-")",
            "size=\(letter.originalValueSize.map(String.init) ?? "-")", "detail=\(quoted(letter.detail))",
        ].joined(separator: " ")
    }

    static func compactJSON(_ fields: [String: JSONValue]) -> String {
        (try? IsletJSON.encode(fields)).map { String(decoding: $0, as: UTF8.self) } ?? "?"
    }

    /// Text that stays on one line.
    static func quoted(_ text: String) -> String {
        let escaped = text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"")
            .replacingOccurrences(of: "\n", with: "\\n").replacingOccurrences(of: "\r", with: "\\r")
        return "\"\(escaped)\""
    }
}
