import Foundation

/// A `Date?` in 8 bytes (minus infinity is none).
struct PackedDate: Sendable, Equatable {
    private var raw = -Double.infinity
    init(_ date: Date? = nil) { raw = date?.timeIntervalSinceReferenceDate ?? -.infinity }
    var date: Date? { raw == -.infinity ? nil : Date(timeIntervalSinceReferenceDate: raw) }
}
