/// The keys of a service: the one it signs with, and every one it still accepts. Rotation: add a
/// new key to both sides' accepted keys, then sign with it, then retire the old one once links
/// signed with it have expired (12 hours).
public struct LinkKeyring: Sendable {
    public let signing: LinkKey
    private let accepted: [String: LinkKey]

    public init(signing: LinkKey, accepted: [LinkKey] = []) {
        self.signing = signing
        var keys = Dictionary(accepted.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        keys[signing.id] = signing
        self.accepted = keys
    }

    func key(id: String) -> LinkKey? { accepted[id] }

    /// The keys of a `kid=secret,…` setting (`ISLET_LINK_KEYS`), sorted by id; at least one.
    public static func keys(fromSecrets secrets: [String: String]) throws(LinkError) -> [LinkKey] {
        guard !secrets.isEmpty else { throw LinkError("must name at least one key: kid=secret") }
        var keys: [LinkKey] = []
        for (kid, secret) in secrets.sorted(by: { $0.key < $1.key }) { keys.append(try LinkKey(id: kid, secret: Array(secret.utf8))) }
        return keys
    }
}
