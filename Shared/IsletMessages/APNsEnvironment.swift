/// The APNs environment a token belongs to. A token only works against its own environment.
public struct APNsEnvironment: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// App Store, TestFlight and ad-hoc builds: `api.push.apple.com`.
    public static let production = APNsEnvironment(rawValue: "production")
    /// Development builds: `api.sandbox.push.apple.com`.
    public static let sandbox = APNsEnvironment(rawValue: "sandbox")

    public static let knownValues: [APNsEnvironment] = [.production, .sandbox]
}
