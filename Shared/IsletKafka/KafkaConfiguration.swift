/// Base values, then defaults, then the user's settings; enforced values may be restated but not changed.
func mergeProperties(
    defaults: [String: String], user: [String: String], enforced: [String: String], base: [String: String]
) throws(KafkaError) -> [String: String] {
    var merged = base
    merged.merge(defaults) { _, new in new }
    merged.merge(user) { _, new in new }
    for (key, required) in enforced {
        if let given = user[key], !sameSetting(key: key, given, required) {
            throw KafkaError(
                code: .configuration,
                message: "\(key)=\(given) is not allowed: Islet's delivery guarantees need \(key)=\(required)")
        }
        merged[key] = required
    }
    return merged
}

private func sameSetting(key: String, _ a: String, _ b: String) -> Bool {
    let a = a.lowercased(), b = b.lowercased()
    if key == "acks" { return (a == "all" || a == "-1") && (b == "all" || b == "-1") }
    return a == b
}

extension Duration {
    /// Whole milliseconds, rounded down, clamped to `Int32` for librdkafka's `int` timeouts.
    var librdkafkaMilliseconds: Int32 {
        let (seconds, attoseconds) = components
        let ms = seconds * 1_000 + attoseconds / 1_000_000_000_000_000
        return Int32(clamping: max(0, ms))
    }
}
