/// Stops at a property that does not hold. libFuzzer records the trap as a crash and saves the
/// input; the replay tests (FuzzTests) stop at it the same way.
func require(_ holds: Bool, _ property: @autoclosure () -> String) {
    if !holds { preconditionFailure(property()) }
}

/// An input's bytes as text, shortened, for a property's message.
func quoted(_ bytes: [UInt8]) -> String {
    String(decoding: bytes.prefix(300), as: UTF8.self).debugDescription
}
