/// A message whose JSON members are listed once, in ``members(_:)``, and whose own writer
/// (``IsletJSONWritable``, through ``IsletJSONMemberWriter``) and own reader
/// (``IsletJSONReadable``, through ``IsletJSONMemberReader``) both follow that list. Its
/// `Codable` conformance stays the one the compiler derives from its properties: the reference
/// the tests hold the writer's bytes and the reader's values to.
protocol IsletJSONMemberList {
    /// A value for the reader to set every member of (what it holds is never read).
    static var unread: Self { get }

    /// Hands each member to `visitor`, in the encoder's order (keys sorted).
    mutating func members(_ visitor: inout some IsletJSONMemberVisitor)
}
