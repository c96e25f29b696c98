import Foundation

/// Writes a message's members (``IsletJSONMemberList``) as one JSON object, byte for byte what the
/// encoder writes: absent optionals left out, in the order the list gives them.
struct IsletJSONMemberWriter: IsletJSONMemberVisitor {
    private var object = IsletJSONObject()
    private var out: [UInt8] = []

    /// Appends `message`'s JSON object to `out`.
    static func write(_ message: some IsletJSONMemberList, into out: inout [UInt8]) {
        var writer = IsletJSONMemberWriter()
        swap(&writer.out, &out)
        var message = message
        message.members(&writer)
        writer.object.end(into: &writer.out)
        swap(&writer.out, &out)
    }

    mutating func string(_ key: String, _ value: inout String) { object.string(key, value, into: &out) }
    mutating func string(_ key: String, _ value: inout String?) { object.string(key, value, into: &out) }
    mutating func integer(_ key: String, _ value: inout Int64) { object.integer(key, value, into: &out) }
    mutating func integer(_ key: String, _ value: inout Int) { object.integer(key, Int64(value), into: &out) }
    mutating func integer(_ key: String, _ value: inout Int?) { object.integer(key, value, into: &out) }
    mutating func bool(_ key: String, _ value: inout Bool) { object.bool(key, value, into: &out) }
    mutating func date(_ key: String, _ value: inout Date) { object.date(key, value, into: &out) }
    mutating func date(_ key: String, _ value: inout Date?) { object.date(key, value, into: &out) }
    mutating func open<Value: OpenEnum>(_ key: String, _ value: inout Value) { object.string(key, value.rawValue, into: &out) }
    mutating func object<Value: IsletJSONWritable & IsletJSONReadable>(_ key: String, _ value: inout Value) {
        object.object(key, value, into: &out)
    }
}
