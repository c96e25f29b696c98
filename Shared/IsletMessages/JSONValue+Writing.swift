/// JSON text for a ``JSONValue`` without `JSONEncoder`'s boxing: the same bytes as
/// ``IsletJSON/encode(_:)`` (keys sorted, slashes not escaped, whole doubles without `.0`), at a
/// fraction of the cost — content-service writes a payload per event.
extension JSONValue {
    /// The value as compact JSON (UTF-8).
    public var jsonBytes: [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(1_024)
        write(into: &out)
        return out
    }

    /// A `Double` as Foundation's encoder writes it: Swift's shortest representation that reads
    /// back the same, without a trailing `.0` (`12.5`, `7`, `1e-07`). Not for infinities or NaN,
    /// which the encoder refuses.
    static func writeNumber(_ value: Double, into out: inout [UInt8]) {
        var text = value.description
        if text.hasSuffix(".0") { text.removeLast(2) }
        out.append(contentsOf: text.utf8)
    }

    public func write(into out: inout [UInt8]) {
        switch self {
        case .null: out.append(contentsOf: "null".utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .integer(let value): out.append(contentsOf: String(value).utf8)
        case .number(let value):
            if let whole = Int64(exactly: value) {
                // As ``encode(to:)`` writes it: digits, since it reads back as `.integer`.
                out.append(contentsOf: String(whole).utf8)
            } else {
                Self.writeNumber(value, into: &out)
            }
        case .string(let value): Self.writeString(value, into: &out)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                item.write(into: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            // The members in key order, without looking each up again.
            for (index, member) in members.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                Self.writeString(member.key, into: &out)
                out.append(UInt8(ascii: ":"))
                member.value.write(into: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    static let hexDigits = Array("0123456789abcdef".utf8)

    static func writeString(_ value: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        let written: Void? = value.utf8.withContiguousStorageIfAvailable { bytes in
            // Runs of bytes that need no escape are copied at once (a payload inside a request is
            // mostly such runs between its quotes).
            var run = 0
            for index in bytes.indices {
                let byte = bytes[index]
                guard byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") else { continue }
                out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run..<index]))
                writeEscape(byte, into: &out)
                run = index + 1
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[run...]))
        }
        if written == nil {
            for byte in value.utf8 {
                if byte < 0x20 || byte == UInt8(ascii: "\"") || byte == UInt8(ascii: "\\") { writeEscape(byte, into: &out) } else { out.append(byte) }
            }
        }
        out.append(UInt8(ascii: "\""))
    }

    /// The escape of a byte JSON text may not hold as it is: a quote, a backslash, a control character.
    private static func writeEscape(_ byte: UInt8, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\\"))
        switch byte {
        case UInt8(ascii: "\""): out.append(UInt8(ascii: "\""))
        case UInt8(ascii: "\\"): out.append(UInt8(ascii: "\\"))
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "t"))
        case 0x08: out.append(UInt8(ascii: "b"))
        case 0x0C: out.append(UInt8(ascii: "f"))
        default:
            out.append(contentsOf: "u00".utf8)
            out.append(hexDigits[Int(byte >> 4)])
            out.append(hexDigits[Int(byte & 0x0F)])
        }
    }
}
