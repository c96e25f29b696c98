import IsletMessages

// How a link names its app (`isl_p`): the bundle id, followed by `~sandbox` for an app whose
// tokens are sandbox ones (a development build). Bundle ids are letters, digits, `-` and `.`
// only, so the `~` cannot be part of one; production, the common case, costs no more bytes.
extension DeepLinkCodec {
    /// What sets a sandbox app's `isl_p` apart: `com.example.food~sandbox`.
    static let sandboxSuffix = "~sandbox"

    /// The value of `isl_p` for `app`.
    static func appValue(_ app: AppTarget) throws(LinkError) -> String {
        do {
            try MessageKey.requireBundleId(app.bundleId)
        } catch {
            throw LinkError("links cannot name app \(app.bundleId.prefix(40)): \(error.problem)")
        }
        switch app.environment {
        case .production: return app.bundleId
        case .sandbox: return app.bundleId + sandboxSuffix
        default: throw LinkError("links name a production or a sandbox app, not environment \(app.environment.rawValue.prefix(20))")
        }
    }

    /// The app an `isl_p` value names; `nil` when it is not one ``appValue(_:)`` writes (so each app
    /// has one spelling: `~production` is refused, not read as production).
    static func app(fromValue value: String) -> AppTarget? {
        var bundleId = value
        var environment = APNsEnvironment.production
        let suffix = value.utf8.suffix(sandboxSuffix.utf8.count)
        if suffix.elementsEqual(sandboxSuffix.utf8) {
            bundleId = String(decoding: value.utf8.dropLast(sandboxSuffix.utf8.count), as: UTF8.self)
            environment = .sandbox
        }
        guard (try? MessageKey.requireBundleId(bundleId)) != nil else { return nil }
        return AppTarget(bundleId: bundleId, environment: environment)
    }
}
