/// A message Islet writes to one of its topics.
///
/// Every message carries a `schemaVersion`. Additive changes (a new optional field, a new enum
/// value) keep the version; a change an older reader cannot handle raises it, and readers refuse
/// versions newer than theirs (``MessageDecodingError/Kind/unsupportedSchemaVersion(_:)``), so
/// such a record goes to the dead-letter topic instead of being misread.
public protocol IsletMessage: Codable, Sendable, Equatable {
    /// The schema version this code writes and the newest it reads.
    static var currentSchemaVersion: Int { get }
    /// The topic this type is written to.
    static var topic: IsletTopic { get }
    /// The version this message was written with.
    var schemaVersion: Int { get }
    /// The record key, by the topic's key rule (`nil`: the topic has no key).
    var key: String? { get }
    /// Checks what the JSON shape cannot express (which fields an event kind needs, known enum
    /// values where the reader must act on them, bounds). Decoding succeeded already.
    func validate() throws(MessageValidationError)
}

extension IsletMessage {
    public func validate() throws(MessageValidationError) {}
}
