/// Where a live activity was tapped.
public struct Surface: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The lock screen (or notification centre) banner.
    public static let lockScreen = Surface(rawValue: "lockScreen")
    /// The Dynamic Island, expanded by a long press.
    public static let islandExpanded = Surface(rawValue: "islandExpanded")
    /// The Dynamic Island's compact presentation, left of the camera.
    public static let compactLeading = Surface(rawValue: "compactLeading")
    /// The Dynamic Island's compact presentation, right of the camera.
    public static let compactTrailing = Surface(rawValue: "compactTrailing")
    /// The Dynamic Island's minimal presentation, when several activities share it.
    public static let minimal = Surface(rawValue: "minimal")

    public static let knownValues: [Surface] = [.lockScreen, .islandExpanded, .compactLeading, .compactTrailing, .minimal]
}
