/// An `Int64?` in 8 bytes (`Int64.min` is none: no sequence or timestamp takes it).
struct PackedInt: Sendable, Equatable {
    private var raw = Int64.min
    init(_ value: Int64? = nil) { raw = value ?? .min }
    var value: Int64? { raw == .min ? nil : raw }
}
