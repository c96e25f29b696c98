import Foundation

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
