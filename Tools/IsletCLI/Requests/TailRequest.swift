import ArgumentParser
import Foundation
import IsletKafka
import IsletMessages
import Logging

/// What `islet tail` reads.
struct TailRequest: Sendable, Equatable {
    var topic: IsletTopic
    var servers: String
    /// librdkafka's security properties (``KafkaSecurity``).
    var security: [String: String] = [:]
    /// Partitions to read (`nil`: all).
    var partitions: [Int32]?
    /// Start at the first record at or after this time (`nil` and no offset: the first record).
    var since: Date?
    /// Start at this offset in every partition read.
    var startOffset: Int64?
    var follow = true
    var limit: Int?
    var key: String?

    init(topic: IsletTopic, servers: String) {
        self.topic = topic
        self.servers = servers
    }

    /// Whether a record's key is the one asked for: the same key, or, asked for an activity id, an
    /// app's activity of that id (`<bundleId>/<activityId>`).
    func matches(_ recordKey: String?) -> Bool {
        guard let key else { return true }
        guard let recordKey else { return false }
        return recordKey == key || (!key.contains("/") && !key.contains(":") && recordKey.hasSuffix("/" + key))
    }
}
