import Foundation
import IsletMessages

/// The answer to a batch: a result per tap, in the order sent, and the counts.
public struct BatchResult: Codable, Sendable, Equatable {
    public var results: [TapResult]
    public var accepted: Int
    public var duplicates: Int
    public var rejected: Int
    public var unavailable: Int

    public init(results: [TapResult]) {
        self.results = results
        accepted = results.count { $0.verdict == .accepted }
        duplicates = results.count { $0.verdict == .duplicate }
        rejected = results.count { $0.verdict == .rejected }
        unavailable = results.count { $0.verdict == .unavailable }
    }
}
