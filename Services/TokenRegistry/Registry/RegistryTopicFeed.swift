import Foundation
import HTTPTypes
import IsletKafka
import IsletMessages
import IsletRuntime
import IsletTokens
import Logging
import Synchronization

/// The registry's table as the reader of the tokens topic feeds it (``Registry/topicFeed``).
struct RegistryTopicFeed: TokenTopicTable {
    let registry: Registry

    @discardableResult
    func apply(_ record: TokenRecord, key: String, partition: Int32, offset: Int64) -> Bool {
        let position = TokenTable.Position(partition: partition, offset: offset)
        let (applied, replaced) = registry.table.applyReplacing(record, key: key, at: position)
        if !applied {
            registry.readBehind(record, key: record.key ?? key, at: position)
            registry.readBehindRegistration(record, key: record.key ?? key, at: position)
        } else if let replaced {
            registry.readOver(replaced.record, by: record, key: record.key ?? key, at: position)
        }
        return applied
    }

    func remove(key: String, partition: Int32, offset: Int64) {
        registry.table.remove(key: key, partition: partition, offset: offset)
    }

    var count: Int { registry.table.count }
}
