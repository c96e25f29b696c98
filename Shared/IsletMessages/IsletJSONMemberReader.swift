import Foundation

/// Reads a message's members (``IsletJSONMemberList``) from a JSON object as the derived `Decodable`
/// conformance reads them: a required member present and of its kind, an optional one absent,
/// `null` or of its kind, other keys ignored. Any member that is not so leaves the message unread
/// (`nil`), and the decoder decides.
struct IsletJSONMemberReader: IsletJSONMemberVisitor {
    private let members: JSONMembers
    /// Whether every member so far was read.
    private var complete = true

    private init(_ members: JSONMembers) { self.members = members }

    /// The message `json` holds, or `nil` when the decoder is to decide.
    static func read<Message: IsletJSONMemberList>(_ type: Message.Type, from json: JSONValue) -> Message? {
        guard let members = JSONMembers(json) else { return nil }
        var reader = IsletJSONMemberReader(members)
        var message = Message.unread
        message.members(&reader)
        return reader.complete ? message : nil
    }

    /// Sets `value` to what `read` gives, or notes that a member was not read.
    private mutating func set<Value>(_ value: inout Value, to read: Value?) {
        if let read { value = read } else { complete = false }
    }

    mutating func string(_ key: String, _ value: inout String) { set(&value, to: members.string(key)) }
    mutating func string(_ key: String, _ value: inout String?) { set(&value, to: members.optional(key, members.string)) }
    mutating func integer(_ key: String, _ value: inout Int64) { set(&value, to: members.integer(key)) }
    mutating func integer(_ key: String, _ value: inout Int) { set(&value, to: members.int(key)) }
    mutating func integer(_ key: String, _ value: inout Int?) { set(&value, to: members.optional(key, members.int)) }
    mutating func bool(_ key: String, _ value: inout Bool) { set(&value, to: members.bool(key)) }
    mutating func date(_ key: String, _ value: inout Date) { set(&value, to: members.date(key)) }
    mutating func date(_ key: String, _ value: inout Date?) { set(&value, to: members.optional(key, members.date)) }
    mutating func open<Value: OpenEnum>(_ key: String, _ value: inout Value) { set(&value, to: members.string(key).map(Value.init(rawValue:))) }
    mutating func object<Value: IsletJSONWritable & IsletJSONReadable>(_ key: String, _ value: inout Value) {
        set(&value, to: members.members[key].flatMap(Value.init(json:)))
    }
}
