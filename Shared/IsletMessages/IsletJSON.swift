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

/// ISO 8601 dates as Islet writes and reads them.
///
/// The arithmetic is done in whole milliseconds since 1970: a `Date` is a `Double`, which cannot
/// hold most millisecond values exactly (`.123` is stored as `.12299990…`), so formatting the
/// fraction directly would write `.122`, and parsing would give a `Date` a hair away from the one
/// the writer meant. Here `parse(format(date)) == truncatedToMilliseconds(date)`, exactly.
public enum IsletDate {
    /// The dates Islet's JSON carries: years 0000 to 9999, what the four digits of its form hold.
    /// ``parse(_:)`` refuses any other; a writer must not hand ``format(_:)`` one either (it would
    /// write text no reader accepts), so a date from outside (APNs's 410 timestamp) is checked
    /// against this first.
    public static let range = date(millisecondsSince1970: -62_167_219_200_000)...date(millisecondsSince1970: 253_402_300_799_999)

    /// `2026-11-22T10:15:30.123Z`: UTC, milliseconds.
    public static func format(_ date: Date) -> String {
        let milliseconds = millisecondsSince1970(date)
        // Floor division, so that dates before 1970 get a positive time of day.
        let (days, millisecondOfDay) = floorDivision(milliseconds, 86_400_000)
        let (year, month, day) = civil(fromDays: days)
        guard (0...9_999).contains(year) else {
            // Outside what four digits hold: Foundation's formatter (never seen in practice).
            let (seconds, millisecond) = floorDivision(milliseconds, 1_000)
            let text = Date(timeIntervalSince1970: Double(seconds)).formatted(Date.ISO8601FormatStyle(timeZone: .gmt))
            return "\(text.dropLast()).\(String(repeating: "0", count: 3 - String(millisecond).count))\(millisecond)Z"
        }
        var bytes = [UInt8]()
        bytes.reserveCapacity(24)
        func append(_ value: Int64, digits: Int) {
            var divisor: Int64 = 1
            for _ in 1..<digits { divisor *= 10 }
            var rest = value
            while divisor > 0 {
                bytes.append(UInt8(ascii: "0") + UInt8(rest / divisor))
                rest %= divisor
                divisor /= 10
            }
        }
        append(year, digits: 4)
        bytes.append(UInt8(ascii: "-"))
        append(month, digits: 2)
        bytes.append(UInt8(ascii: "-"))
        append(day, digits: 2)
        bytes.append(UInt8(ascii: "T"))
        append(millisecondOfDay / 3_600_000, digits: 2)
        bytes.append(UInt8(ascii: ":"))
        append(millisecondOfDay / 60_000 % 60, digits: 2)
        bytes.append(UInt8(ascii: ":"))
        append(millisecondOfDay / 1_000 % 60, digits: 2)
        bytes.append(UInt8(ascii: "."))
        append(millisecondOfDay % 1_000, digits: 3)
        bytes.append(UInt8(ascii: "Z"))
        return String(decoding: bytes, as: UTF8.self)
    }

    /// What the fast path made of a text.
    enum Canonical {
        case date(Date)
        /// Islet's shape, but not a real time (February 30th, 24:00, …): refused, not normalized.
        case invalid
        /// Another shape: for Foundation's parser.
        case other
    }

    /// Reads Islet's own form, `YYYY-MM-DDTHH:MM:SS.mmmZ`, without Foundation's parser (the common
    /// case, on every message).
    static func parseCanonical(_ text: String) -> Canonical {
        let u = Array(text.utf8)
        guard u.count == 24, u[4] == UInt8(ascii: "-"), u[7] == UInt8(ascii: "-"), u[10] == UInt8(ascii: "T"), u[13] == UInt8(ascii: ":"),
            u[16] == UInt8(ascii: ":"), u[19] == UInt8(ascii: "."), u[23] == UInt8(ascii: "Z")
        else { return .other }
        func number(_ range: Range<Int>) -> Int64? {
            var value: Int64 = 0
            for i in range {
                guard (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(u[i]) else { return nil }
                value = value * 10 + Int64(u[i] - UInt8(ascii: "0"))
            }
            return value
        }
        guard let year = number(0..<4), let month = number(5..<7), let day = number(8..<10), let hour = number(11..<13),
            let minute = number(14..<16), let second = number(17..<19), let millisecond = number(20..<23),
            (1...12).contains(month), day >= 1, day <= daysIn(month: month, year: year), hour < 24, minute < 60, second < 60
        else { return .invalid }
        let days = Self.days(fromCivil: year, month, day)
        return .date(date(millisecondsSince1970: ((days * 24 + hour) * 60 + minute) * 60_000 + second * 1_000 + millisecond))
    }

    private static func floorDivision(_ value: Int64, _ divisor: Int64) -> (Int64, Int64) {
        let (quotient, remainder) = value.quotientAndRemainder(dividingBy: divisor)
        return remainder < 0 ? (quotient - 1, remainder + divisor) : (quotient, remainder)
    }

    private static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's `days_from_civil`).
    private static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The date of a day since 1970-01-01 (Howard Hinnant's `civil_from_days`).
    private static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    /// Accepts any offset, with or without a fraction; digits after the third fractional one are
    /// dropped. A date outside ``range`` is refused (Foundation's parser reads longer years).
    public static func parse(_ text: String) -> Date? {
        switch parseCanonical(text) {
        case .date(let date): return date
        case .invalid: return nil
        case .other: break
        }
        // The fraction is read here, the rest by Foundation: ISO 8601 has no other '.'.
        var wholeText = text
        var millisecond: Int64 = 0
        if let dot = text.firstIndex(of: ".") {
            let digits = text[text.index(after: dot)...].prefix { $0.isASCII && $0.isNumber }
            guard !digits.isEmpty else { return nil }
            millisecond = Int64(String(digits.prefix(3)).padding(toLength: 3, withPad: "0", startingAt: 0)) ?? 0
            wholeText = String(text[..<dot]) + text[digits.endIndex...]
        }
        guard let whole = try? Date.ISO8601FormatStyle().parse(wholeText), range.contains(whole) else { return nil }
        let seconds = Int64(whole.timeIntervalSince1970.rounded())
        return date(millisecondsSince1970: seconds * 1_000 + millisecond)
    }

    /// The date rounded down to whole milliseconds: what survives a round trip through JSON.
    ///
    /// A date less than a microsecond below a millisecond counts as that millisecond: that is below
    /// what `Date` can resolve, and `Date(timeIntervalSince1970: 1_795_342_530.123)`, stored a hair
    /// below `.123`, must stay `.123`. Far from 2001 (before about 1700, after about 2240) `Date`
    /// resolves less than a microsecond, and the margin is a few units of its last place instead.
    public static func truncatedToMilliseconds(_ date: Date) -> Date {
        Self.date(millisecondsSince1970: millisecondsSince1970(date))
    }

    private static func millisecondsSince1970(_ date: Date) -> Int64 {
        // `Date` counts from 2001: `timeIntervalSince1970` adds 978,307,200 s, rounding once more,
        // so a whole millisecond can come back up to a unit in the last place below itself (a date
        // parsed from 0911-11-22T10:17:12.004Z came back as .003 when the margin was 1 µs).
        let milliseconds = date.timeIntervalSince1970 * 1_000
        let margin = min(0.5, max(0.001, 2 * milliseconds.ulp))
        // Beyond what 64 bits of milliseconds hold (300 million years): the nearest end, not a trap.
        return Int64(exactly: (milliseconds + margin).rounded(.down)) ?? (milliseconds < 0 ? .min : .max)
    }

    private static func date(millisecondsSince1970 milliseconds: Int64) -> Date {
        Date(timeIntervalSince1970: Double(milliseconds) / 1_000)
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
