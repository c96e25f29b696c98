import Foundation
import IsletMessages

/// What a widget link leads to, for analytics: which activity, which surface and element was
/// tapped, and which content the phone was showing.
public struct TapTarget: Sendable, Hashable {
    public var activityId: String
    /// The Swift type name of the widget's `ActivityAttributes`.
    public var attributesType: String
    public var surface: Surface
    /// The element's id in the layout (`eta`, `courier`, `score`), or `widget` for the whole view.
    public var element: String
    /// The `contentSequence` of the content the link was part of.
    public var contentSequence: Int64

    public init(activityId: String, attributesType: String, surface: Surface, element: String, contentSequence: Int64) {
        self.activityId = activityId
        self.attributesType = attributesType
        self.surface = surface
        self.element = element
        self.contentSequence = contentSequence
    }
}
