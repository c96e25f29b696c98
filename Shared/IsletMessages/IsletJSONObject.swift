import Foundation

/// Writes one JSON object's members, which the caller gives in the encoder's sorted key order.
public struct IsletJSONObject {
    private var empty = true

    public init() {}

    /// The key of the next member (the caller then writes its value).
    public mutating func key(_ name: String, into out: inout [UInt8]) {
        out.append(empty ? UInt8(ascii: "{") : UInt8(ascii: ","))
        empty = false
        JSONValue.writeString(name, into: &out)
        out.append(UInt8(ascii: ":"))
    }

    public mutating func string(_ name: String, _ value: String?, into out: inout [UInt8]) {
        guard let value else { return }
        key(name, into: &out)
        JSONValue.writeString(value, into: &out)
    }

    public mutating func integer(_ name: String, _ value: Int64, into out: inout [UInt8]) {
        key(name, into: &out)
        out.append(contentsOf: String(value).utf8)
    }

    public mutating func integer(_ name: String, _ value: Int?, into out: inout [UInt8]) {
        guard let value else { return }
        integer(name, Int64(value), into: &out)
    }

    public mutating func integer(_ name: String, _ value: Int64?, into out: inout [UInt8]) {
        guard let value else { return }
        integer(name, value, into: &out)
    }

    /// A `Double` as the encoder writes it (``JSONValue/writeNumber(_:into:)``).
    public mutating func number(_ name: String, _ value: Double?, into out: inout [UInt8]) {
        guard let value else { return }
        key(name, into: &out)
        JSONValue.writeNumber(value, into: &out)
    }

    public mutating func bool(_ name: String, _ value: Bool, into out: inout [UInt8]) {
        key(name, into: &out)
        out.append(contentsOf: (value ? "true" : "false").utf8)
    }

    public mutating func date(_ name: String, _ value: Date?, into out: inout [UInt8]) {
        guard let value else { return }
        date(name, value, into: &out)
    }

    public mutating func date(_ name: String, _ value: Date, into out: inout [UInt8]) {
        key(name, into: &out)
        JSONValue.writeString(IsletDate.format(value), into: &out)
    }

    public mutating func object(_ name: String, _ value: (some IsletJSONWritable)?, into out: inout [UInt8]) {
        guard let value else { return }
        key(name, into: &out)
        value.writeJSON(into: &out)
    }

    /// Closes the object (`{}` when it has no member).
    public func end(into out: inout [UInt8]) {
        if empty { out.append(UInt8(ascii: "{")) }
        out.append(UInt8(ascii: "}"))
    }
}
