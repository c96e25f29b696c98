import Foundation
import IsletMessages

/// What a widget link leads to, for analytics: which app and activity, which surface and element
/// was tapped, and which content the phone was showing.
public struct TapTarget: Sendable, Hashable {
    public var activityId: String
    /// The Swift type name of the widget's `ActivityAttributes`.
    public var attributesType: String
    public var surface: Surface
    /// The element's id in the layout (`eta`, `courier`, `score`), or `widget` for the whole view.
    public var element: String
    /// The `contentSequence` of the content the link was part of.
    public var contentSequence: Int64
    /// The app the content was made for (`isl_p`); `nil` for a link signed before links named
    /// their app, which still verifies (``DeepLinkCodec``).
    public var app: AppTarget?

    public init(activityId: String, attributesType: String, surface: Surface, element: String, contentSequence: Int64, app: AppTarget? = nil) {
        self.activityId = activityId
        self.attributesType = attributesType
        self.surface = surface
        self.element = element
        self.contentSequence = contentSequence
        self.app = app
    }
}
