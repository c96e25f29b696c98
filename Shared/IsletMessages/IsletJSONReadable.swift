/// A message that can be made from a ``JSONValue`` read by ``JSONReader``: `nil` whenever the
/// value is not exactly what the message's `Decodable` conformance would accept, and the decoder
/// then decides (with its error when there is one).
public protocol IsletJSONReadable {
    init?(json: JSONValue)
}
