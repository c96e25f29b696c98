import ArgumentParser
import Foundation
import IsletKafka
import IsletMessages
import Logging

/// `--since`: an ISO 8601 time or an age.
enum SinceParsing {
    static func date(_ text: String, now: Date) throws -> Date {
        if let date = IsletDate.parse(text) { return date }
        let units: [Character: Double] = ["s": 1, "m": 60, "h": 3_600, "d": 86_400]
        if let unit = text.last, let seconds = units[unit], let amount = Double(text.dropLast()), amount >= 0, amount.isFinite {
            return now.addingTimeInterval(-amount * seconds)
        }
        throw ValidationError("--since expects an ISO 8601 time (2026-11-22T10:15:30Z) or an age such as 90s, 10m, 2h, 1d; got \(text)")
    }
}
