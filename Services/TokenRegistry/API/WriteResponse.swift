import Foundation
import IsletMessages

/// The answer to a write.
public struct WriteResponse: Codable, Sendable, Equatable {
    public var change: Change
    public var token: TokenStateView
}
