import Foundation
import IsletMessages
import Logging

/// A set of the most recent `capacity` ids (the oldest is forgotten first).
struct RecentIDs {
    private var members: Set<String> = []
    private var order: [String] = []
    private var head = 0
    let capacity: Int

    init(capacity: Int) { self.capacity = capacity }

    func contains(_ id: String) -> Bool { members.contains(id) }

    var count: Int { members.count }

    mutating func insert(_ id: String) {
        guard members.insert(id).inserted else { return }
        if order.count < capacity {
            order.append(id)
        } else {
            members.remove(order[head])
            order[head] = id
            head = (head + 1) % capacity
        }
    }
}
