import Foundation

/// Reads JSON text (RFC 8259) into a ``JSONValue`` without `JSONDecoder`'s boxing, for messages
/// read once per record on a hot path (``IsletJSONReadable``).
///
/// It answers only when it is sure to give what ``IsletJSON``'s decoder gives: on anything it does
/// not take (text that is not JSON, a duplicate key, a lone surrogate, a number it would read
/// differently, nesting deeper than 128) it returns `nil`, and the caller decodes with `JSONDecoder`,
/// which gives the value or the error with its field. Tests and the message fuzzer hold the two to
/// the same values.
public enum JSONReader {
    static let maximumDepth = 128

    /// The value of `bytes`, or `nil` when the decoder is to decide.
    public static func value(of bytes: [UInt8]) -> JSONValue? {
        bytes.withUnsafeBufferPointer { buffer in
            var reader = Cursor(bytes: buffer)
            reader.skipWhitespace()
            guard let value = reader.value(depth: 0) else { return nil }
            reader.skipWhitespace()
            return reader.index == buffer.count ? value : nil
        }
    }

    struct Cursor {
        let bytes: UnsafeBufferPointer<UInt8>
        var index = 0

        init(bytes: UnsafeBufferPointer<UInt8>) { self.bytes = bytes }

        mutating func skipWhitespace() {
            while index < bytes.count {
                switch bytes[index] {
                case 0x20, 0x09, 0x0A, 0x0D: index += 1
                default: return
                }
            }
        }

        mutating func value(depth: Int) -> JSONValue? {
            guard index < bytes.count, depth < JSONReader.maximumDepth else { return nil }
            switch bytes[index] {
            case UInt8(ascii: "\""): return string().map(JSONValue.string)
            case UInt8(ascii: "{"): return object(depth: depth)
            case UInt8(ascii: "["): return array(depth: depth)
            case UInt8(ascii: "t"): return literal("true", .bool(true))
            case UInt8(ascii: "f"): return literal("false", .bool(false))
            case UInt8(ascii: "n"): return literal("null", .null)
            default: return number()
            }
        }

        mutating func literal(_ word: StaticString, _ value: JSONValue) -> JSONValue? {
            let count = word.utf8CodeUnitCount
            guard bytes.count - index >= count else { return nil }
            for offset in 0..<count where bytes[index + offset] != word.utf8Start[offset] { return nil }
            index += count
            return value
        }

        mutating func object(depth: Int) -> JSONValue? {
            index += 1  // {
            var members: [String: JSONValue] = [:]
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "}") {
                index += 1
                return .object(members)
            }
            while true {
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: "\""), let key = string() else { return nil }
                skipWhitespace()
                guard index < bytes.count, bytes[index] == UInt8(ascii: ":") else { return nil }
                index += 1
                skipWhitespace()
                guard let value = value(depth: depth + 1) else { return nil }
                // A key twice: which one the decoder keeps is its business.
                guard members.updateValue(value, forKey: key) == nil else { return nil }
                skipWhitespace()
                guard index < bytes.count else { return nil }
                switch bytes[index] {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "}"):
                    index += 1
                    return .object(members)
                default: return nil
                }
            }
        }

        mutating func array(depth: Int) -> JSONValue? {
            index += 1  // [
            var items: [JSONValue] = []
            skipWhitespace()
            if index < bytes.count, bytes[index] == UInt8(ascii: "]") {
                index += 1
                return .array(items)
            }
            while true {
                skipWhitespace()
                guard let item = value(depth: depth + 1) else { return nil }
                items.append(item)
                skipWhitespace()
                guard index < bytes.count else { return nil }
                switch bytes[index] {
                case UInt8(ascii: ","): index += 1
                case UInt8(ascii: "]"):
                    index += 1
                    return .array(items)
                default: return nil
                }
            }
        }

        /// A string; the cursor is on its opening quote. The bytes are UTF-8 already (``IsletJSON``
        /// checks the whole text first).
        mutating func string() -> String? {
            index += 1  // "
            let start = index
            // Most strings have no escape: one copy of their bytes.
            while index < bytes.count {
                let byte = bytes[index]
                if byte == UInt8(ascii: "\"") {
                    defer { index += 1 }
                    return String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
                }
                if byte == UInt8(ascii: "\\") { break }
                if byte < 0x20 { return nil }
                index += 1
            }
            var text = Array(UnsafeBufferPointer(rebasing: bytes[start..<min(index, bytes.count)]))
            text.reserveCapacity(bytes.count - start)
            while index < bytes.count {
                let byte = bytes[index]
                index += 1
                switch byte {
                case UInt8(ascii: "\""): return String(decoding: text, as: UTF8.self)
                case 0..<0x20: return nil
                case UInt8(ascii: "\\"):
                    guard index < bytes.count else { return nil }
                    let escaped = bytes[index]
                    index += 1
                    switch escaped {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): text.append(escaped)
                    case UInt8(ascii: "b"): text.append(0x08)
                    case UInt8(ascii: "f"): text.append(0x0C)
                    case UInt8(ascii: "n"): text.append(0x0A)
                    case UInt8(ascii: "r"): text.append(0x0D)
                    case UInt8(ascii: "t"): text.append(0x09)
                    case UInt8(ascii: "u"):
                        guard var scalar = hex4() else { return nil }
                        if (0xD800..<0xDC00).contains(scalar) {
                            // A high surrogate: its low one must follow.
                            guard bytes.count - index >= 2, bytes[index] == UInt8(ascii: "\\"), bytes[index + 1] == UInt8(ascii: "u") else { return nil }
                            index += 2
                            guard let low = hex4(), (0xDC00..<0xE000).contains(low) else { return nil }
                            scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                        } else if (0xDC00..<0xE000).contains(scalar) {
                            return nil
                        }
                        guard let unicode = Unicode.Scalar(scalar) else { return nil }
                        text.append(contentsOf: UTF8.encode(unicode)!)
                    default: return nil
                    }
                default:
                    // The run of plain bytes up to the next quote, backslash or control byte, at once.
                    var end = index
                    while end < bytes.count, bytes[end] >= 0x20, bytes[end] != UInt8(ascii: "\""), bytes[end] != UInt8(ascii: "\\") { end += 1 }
                    text.append(byte)
                    text.append(contentsOf: UnsafeBufferPointer(rebasing: bytes[index..<end]))
                    index = end
                }
            }
            return nil
        }

        mutating func hex4() -> UInt32? {
            guard bytes.count - index >= 4 else { return nil }
            var value: UInt32 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: return nil
                }
                value = value << 4 | UInt32(digit)
                index += 1
            }
            return value
        }

        /// A number, as the decoder reads one into a ``JSONValue``: `.integer` when it is written as
        /// a whole number that fits 64 bits, `.number` when it has a fraction. A whole number written
        /// with a fraction or an exponent (`7.0`, `1e3`) is left to the decoder: it reads as
        /// `.integer` in a ``JSONValue``, but whether an integer field takes it is the decoder's
        /// business. So is a number beyond 2^53 written that way (whether it is read exactly).
        mutating func number() -> JSONValue? {
            let start = index
            if index < bytes.count, bytes[index] == UInt8(ascii: "-") { index += 1 }
            // Integer part: 0, or a digit 1-9 and more digits.
            guard index < bytes.count, isDigit(bytes[index]) else { return nil }
            if bytes[index] == UInt8(ascii: "0") {
                index += 1
                if index < bytes.count, isDigit(bytes[index]) { return nil }
            } else {
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            var whole = true
            if index < bytes.count, bytes[index] == UInt8(ascii: ".") {
                whole = false
                index += 1
                guard index < bytes.count, isDigit(bytes[index]) else { return nil }
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            if index < bytes.count, bytes[index] == UInt8(ascii: "e") || bytes[index] == UInt8(ascii: "E") {
                whole = false
                index += 1
                if index < bytes.count, bytes[index] == UInt8(ascii: "+") || bytes[index] == UInt8(ascii: "-") { index += 1 }
                guard index < bytes.count, isDigit(bytes[index]) else { return nil }
                while index < bytes.count, isDigit(bytes[index]) { index += 1 }
            }
            let text = String(decoding: UnsafeBufferPointer(rebasing: bytes[start..<index]), as: UTF8.self)
            if whole, let integer = Int64(text) { return .integer(integer) }
            guard let double = Double(text), double.isFinite, abs(double) < 9_007_199_254_740_992, double.rounded() != double else { return nil }
            return .number(double)
        }

        func isDigit(_ byte: UInt8) -> Bool { byte >= UInt8(ascii: "0") && byte <= UInt8(ascii: "9") }
    }
}

extension AppTarget: IsletJSONReadable {
    public init?(json: JSONValue) {
        guard let members = JSONMembers(json), let bundleId = members.string("bundleId"), let environment = members.string("environment") else {
            return nil
        }
        self.init(bundleId: bundleId, environment: APNsEnvironment(rawValue: environment))
    }
}

extension ActivityEvent: IsletJSONReadable {
    public init?(json: JSONValue) {
        guard let members = JSONMembers(json), let schemaVersion = members.int("schemaVersion"), let eventId = members.string("eventId"),
            let activityId = members.string("activityId"), let bundleId = members.optional("bundleId", members.string), let kind = members.string("kind"),
            let attributesType = members.string("attributesType"), let fields = members.object("fields"),
            let urgency = members.string("urgency"), let occurredAt = members.date("occurredAt"), let sequence = members.integer("sequence"),
            let attributes = members.optional("attributes", members.object), let source = members.optional("source", members.string),
            let presentation = members.optional("presentation", { members.members[$0].flatMap(EventPresentation.init(json:)) }),
            let at = members.optional("at", members.date)
        else { return nil }
        var startTarget: PushToStartTarget?
        if !members.isAbsent("startTarget") {
            guard let target = members.members["startTarget"].flatMap(JSONMembers.init), let app = target.members["app"].flatMap(AppTarget.init(json:)),
                let deviceId = target.optional("deviceId", target.string), let userId = target.optional("userId", target.string)
            else { return nil }
            startTarget = PushToStartTarget(app: app, deviceId: deviceId, userId: userId)
        }
        self.init(
            eventId: eventId, activityId: activityId, kind: ActivityEventKind(rawValue: kind), attributesType: attributesType, fields: fields,
            urgency: Urgency(rawValue: urgency), occurredAt: occurredAt, sequence: sequence, startTarget: startTarget, attributes: attributes,
            source: source, bundleId: bundleId, presentation: presentation, at: at, schemaVersion: schemaVersion)
    }
}

extension JSONValue: IsletJSONReadable {
    public init?(json: JSONValue) { self = json }
}
