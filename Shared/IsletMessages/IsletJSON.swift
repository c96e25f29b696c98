import Foundation

/// Islet's JSON conventions, in one place (docs/topics.md explains them to other teams).
///
/// - Keys are camelCase; `null` and an absent key mean the same for optional fields.
/// - Dates are ISO 8601 strings in UTC with milliseconds (`2026-11-22T10:15:30.123Z`); readers
///   also accept other offsets and no fraction. Precision is one millisecond.
/// - Enums are strings; a reader keeps a value it does not know (``OpenEnum``) and decides, in
///   `validate()`, whether it can act on it.
/// - Unknown fields are ignored; missing optional fields are `nil`; a missing required field is a
///   ``MessageDecodingError`` naming it.
/// - Output is compact with sorted keys, so equal messages are equal bytes.
public enum IsletJSON {
    /// Encodes a message as UTF-8 JSON bytes (by its own writer when it has one: ``IsletJSONWritable``).
    public static func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        if let writable = value as? any IsletJSONWritable {
            var out: [UInt8] = []
            out.reserveCapacity(512)
            writable.writeJSON(into: &out)
            return out
        }
        return try encodeWithEncoder(value)
    }

    /// What Foundation's encoder, configured by these conventions, writes for `value`: what an
    /// ``IsletJSONWritable`` writer must match.
    package static func encodeWithEncoder<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        Array(try sharedEncoder.encode(value))
    }

    /// Encodes with indentation, for docs and golden files.
    public static func encodePretty<Value: Encodable>(_ value: Value) throws -> String {
        let encoder = makeEncoder()
        encoder.outputFormatting.insert(.prettyPrinted)
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// Decodes an Islet message, checking its schema version.
    ///
    /// A version this reader does not know wins over any other error: a newer writer may have
    /// renamed or dropped a field, and the record must be reported as "too new", not as broken.
    public static func decode<Message: IsletMessage>(_ type: Message.Type, from bytes: [UInt8]) throws(MessageDecodingError) -> Message {
        let message: Message
        do throws(MessageDecodingError) {
            message = try decodeValue(type, from: bytes)
        } catch {
            if let version = try? decodeValue(SchemaVersionProbe.self, from: bytes).schemaVersion {
                try checkSchemaVersion(version, of: type)
            }
            throw error
        }
        try checkSchemaVersion(message.schemaVersion, of: type)
        return message
    }

    private struct SchemaVersionProbe: Decodable {
        var schemaVersion: Int
    }

    private static func checkSchemaVersion<Message: IsletMessage>(_ version: Int, of type: Message.Type) throws(MessageDecodingError) {
        guard version >= 1, version <= Message.currentSchemaVersion else {
            throw MessageDecodingError(
                messageType: "\(Message.self)", kind: .unsupportedSchemaVersion(version), path: "schemaVersion",
                message: "schemaVersion \(version) is not supported (this reader knows 1...\(Message.currentSchemaVersion))")
        }
    }

    /// Decodes any Decodable with Islet's conventions, mapping errors to ``MessageDecodingError``.
    public static func decodeValue<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws(MessageDecodingError) -> Value {
        guard isUTF8Text(bytes) else {
            throw MessageDecodingError(messageType: "\(Value.self)", kind: .malformedJSON, path: "", message: "not UTF-8 text")
        }
        if let readable = Value.self as? any IsletJSONReadable.Type, let json = JSONReader.value(of: bytes),
            let value = readable.init(json: json) as? Value
        {
            return value
        }
        return try decodeWithDecoder(type, from: bytes)
    }

    /// What Foundation's decoder, configured by these conventions, reads from `bytes` (UTF-8 text):
    /// what an ``IsletJSONReadable`` reading must match.
    package static func decodeWithDecoder<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws(MessageDecodingError) -> Value {
        do {
            return try sharedDecoder.decode(type, from: Data(bytes))
        } catch let error as DecodingError {
            throw MessageDecodingError(decoding: nullAsMissing(error, in: bytes), messageType: "\(Value.self)")
        } catch {
            throw MessageDecodingError(messageType: "\(Value.self)", kind: .malformedJSON, path: "", message: "\(error)")
        }
    }

    /// JSON text is UTF-8 and never holds a NUL byte. Checked up front because Foundation reads
    /// UTF-16 as well, and notices bad UTF-8 only in a string it happens to decode.
    ///
    /// Eight bytes at a time: every message read passes here (the dispatcher's push requests are
    /// about 2.6 KB each).
    static func isUTF8Text(_ bytes: [UInt8]) -> Bool {
        let scan = bytes.withUnsafeBytes { raw -> (noZero: Bool, ascii: Bool) in
            let ones: UInt64 = 0x0101_0101_0101_0101, highs: UInt64 = 0x8080_8080_8080_8080
            var high: UInt64 = 0
            var offset = 0
            while offset + 8 <= raw.count {
                let word = raw.loadUnaligned(fromByteOffset: offset, as: UInt64.self)
                // Non-zero exactly when one of the eight bytes is zero (a borrow starts only at a zero byte).
                if (word &- ones) & ~word & highs != 0 { return (false, false) }
                high |= word
                offset += 8
            }
            for index in offset..<raw.count {
                if raw[index] == 0 { return (false, false) }
                high |= UInt64(raw[index])
            }
            return (true, high & highs == 0)
        }
        guard scan.noZero else { return false }
        return scan.ascii || String(validating: bytes, as: UTF8.self) != nil
    }

    /// Foundation reports `null` where a `Bool` belongs as a type mismatch; like any other required
    /// field that is `null`, it is a missing value. Only runs when decoding has already failed.
    private static func nullAsMissing(_ error: DecodingError, in bytes: [UInt8]) -> DecodingError {
        guard case .typeMismatch(let type, let context) = error,
            var value = try? makeDecoder().decode(JSONValue.self, from: Data(bytes))
        else { return error }
        for key in context.codingPath {
            switch value {
            case .object(let members) where members[key.stringValue] != nil:
                value = members[key.stringValue]!
            case .array(let elements) where key.intValue.map(elements.indices.contains) == true:
                value = elements[key.intValue!]
            default:
                return error
            }
        }
        return value == .null ? .valueNotFound(type, context) : error
    }

    /// One encoder and one decoder for every message: making them per message showed in profiles.
    /// Both are safe to share between threads once configured.
    private static let sharedDecoder = makeDecoder()
    private static let sharedEncoder = makeEncoder()

    static func makeEncoder() -> JSONEncoder {
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        encoder.dateEncodingStrategy = .custom { date, encoder in
            var container = encoder.singleValueContainer()
            try container.encode(IsletDate.format(date))
        }
        return encoder
    }

    static func makeDecoder() -> JSONDecoder {
        let decoder = JSONDecoder()
        decoder.userInfo[JSONValue.fromJSONText] = true
        decoder.dateDecodingStrategy = .custom { decoder in
            let container = try decoder.singleValueContainer()
            let text = try container.decode(String.self)
            guard let date = IsletDate.parse(text) else {
                throw DecodingError.dataCorruptedError(
                    in: container, debugDescription: "expected an ISO 8601 date like 2026-11-22T10:15:30.123Z, got \"\(text)\"")
            }
            return date
        }
        return decoder
    }
}
