/// `what` did not finish within `limit`.
public struct TimeoutError: Error, CustomStringConvertible {
    public var what: String
    public var limit: Duration
    public var description: String { "\(what) did not finish within \(limit)" }

    public init(what: String, limit: Duration) {
        self.what = what
        self.limit = limit
    }
}
