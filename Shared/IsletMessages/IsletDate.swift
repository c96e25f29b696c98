import Foundation

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
