import Foundation

/// Is handed a message's JSON members one by one, each with its key and its value, by the
/// message's one list of them (``IsletJSONMemberList/members(_:)``): the writer
/// (``IsletJSONMemberWriter``) writes each value, the reader (``IsletJSONMemberReader``) sets it.
protocol IsletJSONMemberVisitor {
    mutating func string(_ key: String, _ value: inout String)
    mutating func string(_ key: String, _ value: inout String?)
    mutating func integer(_ key: String, _ value: inout Int64)
    /// An `Int` (written as a JSON integer; read only when it fits).
    mutating func integer(_ key: String, _ value: inout Int)
    mutating func integer(_ key: String, _ value: inout Int?)
    mutating func bool(_ key: String, _ value: inout Bool)
    mutating func date(_ key: String, _ value: inout Date)
    mutating func date(_ key: String, _ value: inout Date?)
    /// An ``OpenEnum``, as its raw string.
    mutating func open<Value: OpenEnum>(_ key: String, _ value: inout Value)
    /// An object that writes and reads its own JSON.
    mutating func object<Value: IsletJSONWritable & IsletJSONReadable>(_ key: String, _ value: inout Value)
}
