/// Why an image cannot become a thumbnail.
public struct ThumbnailError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}
