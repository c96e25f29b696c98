import ArgumentParser
import Foundation
import IsletKafka
import IsletMessages
import Logging

/// Topic names as the CLI accepts them.
enum TopicNames {
    static let shortNames: [(String, IsletTopic)] = [
        ("tokens", IsletTopics.tokens), ("events", IsletTopics.activityEvents), ("activity-events", IsletTopics.activityEvents),
        ("requests", IsletTopics.pushRequests), ("push-requests", IsletTopics.pushRequests),
        ("outcomes", IsletTopics.pushOutcomes), ("push-outcomes", IsletTopics.pushOutcomes),
        ("clicks", IsletTopics.clicks), ("clicks-rejected", IsletTopics.clicksRejected), ("dlq", IsletTopics.deadLetters),
    ]

    static func resolve(_ text: String) throws -> IsletTopic {
        if let topic = IsletTopics.named(text) { return topic }
        if let (_, topic) = shortNames.first(where: { $0.0 == text }) { return topic }
        throw ValidationError(
            "\(text) is not an Islet topic: use one of \(IsletTopics.all.map(\.name).joined(separator: ", ")) or \(shortNames.map(\.0).joined(separator: ", "))")
    }
}
