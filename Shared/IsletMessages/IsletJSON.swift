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
    /// Encodes a message as UTF-8 JSON bytes.
    public static func encode<Value: Encodable>(_ value: Value) throws -> [UInt8] {
        Array(try makeEncoder().encode(value))
    }

    /// Encodes with indentation, for docs and golden files.
    public static func encodePretty<Value: Encodable>(_ value: Value) throws -> String {
        let encoder = makeEncoder()
        encoder.outputFormatting.insert(.prettyPrinted)
        return String(decoding: try encoder.encode(value), as: UTF8.self)
    }

    /// Decodes an Islet message, checking its schema version.
    public static func decode<Message: IsletMessage>(_ type: Message.Type, from bytes: [UInt8]) throws(MessageDecodingError) -> Message {
        let message: Message = try decodeValue(type, from: bytes)
        guard message.schemaVersion >= 1, message.schemaVersion <= Message.currentSchemaVersion else {
            throw MessageDecodingError(
                messageType: "\(Message.self)", kind: .unsupportedSchemaVersion(message.schemaVersion), path: "schemaVersion",
                message: "schemaVersion \(message.schemaVersion) is not supported (this reader knows 1...\(Message.currentSchemaVersion))")
        }
        return message
    }

    /// Decodes any Decodable with Islet's conventions, mapping errors to ``MessageDecodingError``.
    public static func decodeValue<Value: Decodable>(_ type: Value.Type, from bytes: [UInt8]) throws(MessageDecodingError) -> Value {
        do {
            return try makeDecoder().decode(type, from: Data(bytes))
        } catch let error as DecodingError {
            throw MessageDecodingError(decoding: error, messageType: "\(Value.self)")
        } catch {
            throw MessageDecodingError(messageType: "\(Value.self)", kind: .malformedJSON, path: "", message: "\(error)")
        }
    }

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

/// ISO 8601 dates as Islet writes and reads them.
public enum IsletDate {
    /// `2026-11-22T10:15:30.123Z`: UTC, milliseconds.
    public static func format(_ date: Date) -> String {
        date.formatted(Date.ISO8601FormatStyle(includingFractionalSeconds: true, timeZone: .gmt))
    }

    /// Accepts any offset, with or without a fraction.
    public static func parse(_ text: String) -> Date? {
        if let date = try? Date.ISO8601FormatStyle(includingFractionalSeconds: true).parse(text) { return date }
        return try? Date.ISO8601FormatStyle().parse(text)
    }

    /// The date rounded down to whole milliseconds: what survives a round trip through JSON.
    public static func truncatedToMilliseconds(_ date: Date) -> Date {
        Date(timeIntervalSince1970: (date.timeIntervalSince1970 * 1000).rounded(.down) / 1000)
    }
}

/// Why bytes could not be read as a message. `path` names the field (dotted, with array indexes).
public struct MessageDecodingError: Error, Sendable, Hashable, CustomStringConvertible {
    public enum Kind: Sendable, Hashable {
        /// Not JSON at all, or not UTF-8.
        case malformedJSON
        /// A required field is absent or `null`.
        case missingField
        /// A field has the wrong JSON type (a string where a number belongs, …).
        case wrongType
        /// A field has the right type but a value that cannot be read (a bad date, …).
        case invalidValue
        /// The message was written with a schema version this reader does not know.
        case unsupportedSchemaVersion(Int)
    }

    public var messageType: String
    public var kind: Kind
    public var path: String
    public var message: String

    public init(messageType: String, kind: Kind, path: String, message: String) {
        self.messageType = messageType
        self.kind = kind
        self.path = path
        self.message = message
    }

    init(decoding error: DecodingError, messageType: String) {
        func dotted(_ path: [any CodingKey]) -> String {
            path.map { key in key.intValue.map { "[\($0)]" } ?? key.stringValue }
                .joined(separator: ".")
                .replacingOccurrences(of: ".[", with: "[")
        }
        switch error {
        case .keyNotFound(let key, let context):
            let path = dotted(context.codingPath + [key])
            self.init(messageType: messageType, kind: .missingField, path: path, message: "required field \(path) is missing")
        case .valueNotFound(_, let context):
            let path = dotted(context.codingPath)
            self.init(messageType: messageType, kind: .missingField, path: path, message: "required field \(path) is null")
        case .typeMismatch(let type, let context):
            let path = dotted(context.codingPath)
            self.init(messageType: messageType, kind: .wrongType, path: path, message: "\(path) should be \(Self.jsonName(of: type))")
        case .dataCorrupted(let context):
            let path = dotted(context.codingPath)
            if context.codingPath.isEmpty {
                self.init(messageType: messageType, kind: .malformedJSON, path: "", message: "not valid JSON: \(context.debugDescription)")
            } else {
                self.init(messageType: messageType, kind: .invalidValue, path: path, message: "\(path): \(context.debugDescription)")
            }
        @unknown default:
            self.init(messageType: messageType, kind: .malformedJSON, path: "", message: "\(error)")
        }
    }

    private static func jsonName(of type: Any.Type) -> String {
        switch type {
        case is String.Type: "a string"
        case is Bool.Type: "a boolean"
        case is Int.Type, is Int64.Type, is Int32.Type, is UInt64.Type, is Double.Type: "a number"
        case is [Any].Type: "an array"
        default: "of type \(type)"
        }
    }

    public var description: String { "\(messageType): \(message)" }
}
