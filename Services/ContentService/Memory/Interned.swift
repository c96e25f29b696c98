import IsletMessages
import Synchronization

enum Interned {
    static let strings = InternTable<String>()
    static let apps = InternTable<AppTarget>()
}

/// Values that repeat across activities (states, attributes types, event kinds, results, apps),
/// held once per process and referred to by a 4-byte code (0: none). Never emptied: what it holds
/// is bounded by the templates, the apps and the kinds of answer, not by the activities.
final class InternTable<Value: Hashable & Sendable>: Sendable {
    private let table = Mutex<(codes: [Value: UInt32], values: [Value])>(([:], []))

    func code(_ value: Value?) -> UInt32 {
        guard let value else { return 0 }
        return table.withLock { table in
            if let code = table.codes[value] { return code }
            table.values.append(value)
            let code = UInt32(table.values.count)
            table.codes[value] = code
            return code
        }
    }

    func value(_ code: UInt32) -> Value? {
        guard code > 0 else { return nil }
        return table.withLock { $0.values[Int(code) - 1] }
    }
}
