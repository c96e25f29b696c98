import Crypto
import Foundation
import IsletMessages

/// Signs and verifies the analytics parameters of widget links (`widgetURL`, `Link`).
///
/// content-service appends to the app's own URL:
///
/// ```
/// fooddelivery://order/42?tab=status&isl_a=order-42&isl_t=DeliveryAttributes&isl_p=com.example.food
///     &isl_s=lockScreen&isl_e=eta&isl_q=7&isl_i=1795000000&isl_k=k2&isl_sig=Qm9vbV9zaWduYXR1cmUx
/// ```
///
/// | parameter | value |
/// | --- | --- |
/// | `isl_a` | activity id |
/// | `isl_t` | attributes type |
/// | `isl_p` | the app: its bundle id, with `~sandbox` after it for a sandbox app; absent in links signed before links named their app |
/// | `isl_s` | surface: `lockScreen`, `islandExpanded`, `compactLeading`, `compactTrailing`, `minimal` |
/// | `isl_e` | element id |
/// | `isl_q` | content sequence |
/// | `isl_i` | issued at, epoch seconds |
/// | `isl_k` | key id |
/// | `isl_sig` | the first 16 bytes of HMAC-SHA256 over the canonical form, base64url without padding |
///
/// The canonical form is `islet-link-v2`, the base URL (the link without Islet's parameters, its
/// other query parameters in their order), then the eight values `isl_a` … `isl_k` in the order
/// above, separated by newlines — so the parameters cannot be moved to another URL, reordered into
/// another meaning, or changed. A link without `isl_p` (signed before links named their app, and
/// still on phones for up to 12 hours) has the canonical form `islet-link-v1` and the seven other
/// values: it verifies as it always did, and names no app. The first line differs, so an app can
/// be neither added to such a link nor removed from a newer one.
public enum DeepLinkCodec {
    /// How long after it was issued a link counts a tap.
    public static let maximumAge: TimeInterval = 12 * 3_600
    /// Clock skew tolerated between the signing service and the phone.
    public static let clockSkew: TimeInterval = 300

    static let prefix = "isl_"
    /// Islet's parameters: the eight every link has, in the order of the canonical form of a
    /// link without an app, then `isl_p` (at ``appSlot``), which links signed before links named
    /// their app lack.
    static let names = ["isl_a", "isl_t", "isl_s", "isl_e", "isl_q", "isl_i", "isl_k", "isl_sig", "isl_p"]
    /// Where `isl_p` is in ``names``.
    static let appSlot = 8

    /// The app's URL with the signed analytics parameters appended.
    public static func sign(baseURL: String, target: TapTarget, issuedAt: Date, key: LinkKey) throws(LinkError) -> String {
        try LinkSigner(
            baseURL: baseURL, activityId: target.activityId, attributesType: target.attributesType, contentSequence: target.contentSequence,
            issuedAt: issuedAt, key: key, app: target.app
        ).sign(surface: target.surface, element: target.element)
    }

    /// Verifies a link as the app received it, for a tap the phone says it made at `tappedAt` and
    /// that reached Islet at `receivedAt`. The link's age is judged by the server's clock
    /// (`receivedAt`): a phone's clock, or a `tappedAt` it sends, cannot revive an old link.
    public static func verify(_ url: String, keyring: LinkKeyring, tappedAt: Date, receivedAt: Date) -> Result<VerifiedLink, LinkRejection> {
        do throws(LinkRejection) {
            let (base, values, app) = try parameters(of: url)
            // The fields, checked before the signature so that a broken link says what is broken.
            let (target, issued) = try fields(values, app: app)
            guard let key = keyring.key(id: values[6]) else {
                throw LinkRejection(.unknownKeyId, "key \(values[6].prefix(32)) is not one of the accepted keys")
            }
            let signature = try signatureBytes(values[7], base: base, values: values.dropLast(), app: app, key: key)
            let issuedAt = Date(timeIntervalSince1970: TimeInterval(issued))
            try checkAge(issuedAt: issuedAt, tappedAt: tappedAt, receivedAt: receivedAt)
            return .success(VerifiedLink(target: target, keyId: key.id, issuedAt: issuedAt, baseURL: base, signature: signature))
        } catch {
            return .failure(error)
        }
    }

    /// The link's base URL (without Islet's parameters, the others in their order), the values of
    /// the eight parameters every link has in the order of ``names``, each present once, and the
    /// value of `isl_p`, present at most once.
    static func parameters(of url: String) throws(LinkRejection) -> (base: String, values: [String], app: String?) {
        guard url.utf8.count <= 4_096 else { throw LinkRejection(.malformedUrl, "longer than 4096 bytes") }
        guard let schemeEnd = url.utf8.firstIndex(of: UInt8(ascii: ":")), schemeEnd != url.utf8.startIndex,
            url.utf8[..<schemeEnd].allSatisfy(isSchemeByte)
        else {
            throw LinkRejection(.malformedUrl, "no URL scheme")
        }
        guard !url.utf8.contains(UInt8(ascii: "#")) else { throw LinkRejection(.malformedUrl, "a fragment is not part of an Islet link") }
        let (path, items) = split(url)
        var ours = [String?](repeating: nil, count: names.count)  // by position in `names`
        var theirs: [Substring] = []
        for item in items {
            // The name ends at the first "=" byte (as URL parsers read a query, not at a Character).
            let equals = item.utf8.firstIndex(of: UInt8(ascii: "="))
            let name = Substring(item.utf8[..<(equals ?? item.utf8.endIndex)])
            guard isOurs(name) else {
                theirs.append(item)
                continue
            }
            guard let slot = names.firstIndex(where: { $0.utf8.elementsEqual(name.utf8) }) else {
                throw LinkRejection(.invalidParameter, "unknown parameter \(name.prefix(20))")
            }
            guard ours[slot] == nil else { throw LinkRejection(.duplicateParameter, "\(names[slot]) appears more than once") }
            guard let equals, let value = percentDecoded(Substring(item.utf8[item.utf8.index(after: equals)...])) else {
                throw LinkRejection(.invalidParameter, "\(names[slot]) has no readable value")
            }
            ours[slot] = value
        }
        for (slot, name) in names.enumerated() where ours[slot] == nil && slot != appSlot {
            throw LinkRejection(.missingParameter, "\(name) is missing")
        }
        let base = theirs.isEmpty ? String(path) : String(path) + "?" + theirs.joined(separator: "&")
        return (base, ours[..<appSlot].map { $0! }, ours[appSlot])
    }

    /// What the link leads to, and when it was issued (epoch seconds), from the values of
    /// `isl_a` … `isl_i` and of `isl_p`, if the link has one.
    static func fields(_ values: [String], app appValue: String?) throws(LinkRejection) -> (TapTarget, issued: Int64) {
        let (activityId, attributesType, surfaceText, element) = (values[0], values[1], values[2], values[3])
        guard isIdentifier(activityId, maxLength: 128) else { throw LinkRejection(.invalidParameter, "isl_a is not an activity id") }
        guard isTypeName(attributesType) else { throw LinkRejection(.invalidParameter, "isl_t is not a type name") }
        let surface = Surface(rawValue: surfaceText)
        guard surface.isKnown else { throw LinkRejection(.invalidParameter, "isl_s is not a known surface") }
        guard isIdentifier(element, maxLength: 64) else { throw LinkRejection(.invalidParameter, "isl_e is not an element id") }
        guard let sequence = decimal(values[4]), sequence >= 0 else {
            throw LinkRejection(.invalidParameter, "isl_q is not a content sequence")
        }
        guard let issued = decimal(values[5]) else { throw LinkRejection(.invalidParameter, "isl_i is not a time") }
        var app: AppTarget?
        if let appValue {
            guard let named = self.app(fromValue: appValue) else {
                throw LinkRejection(.invalidParameter, "isl_p is not an app (a bundle id, followed by ~sandbox for a sandbox app)")
            }
            app = named
        }
        let target = TapTarget(
            activityId: activityId, attributesType: attributesType, surface: surface, element: element, contentSequence: sequence, app: app)
        return (target, issued)
    }

    /// The signature's bytes (`isl_sig`), once they match the MAC of the canonical form.
    static func signatureBytes(
        _ text: String, base: String, values: some Collection<String>, app: String?, key: LinkKey
    ) throws(LinkRejection) -> [UInt8] {
        guard let given = base64URLDecode(text), given.count == 16 else {
            throw LinkRejection(.badSignature, "isl_sig is not a 16-byte base64url value")
        }
        let expected = mac(base: base, values: values, app: app, key: key)
        guard constantTimeEqual(given, expected) else { throw LinkRejection(.badSignature, "the signature does not match") }
        return given
    }

    /// A link counts a tap made no earlier than its issue (within ``clockSkew``) and reaching Islet
    /// within ``maximumAge`` of it.
    static func checkAge(issuedAt: Date, tappedAt: Date, receivedAt: Date) throws(LinkRejection) {
        guard issuedAt <= tappedAt.addingTimeInterval(clockSkew) else {
            throw LinkRejection(.invalidParameter, "issued after the tap")
        }
        guard receivedAt.timeIntervalSince(issuedAt) <= maximumAge else {
            throw LinkRejection(.expired, "issued more than 12 hours before the tap reached Islet")
        }
    }
}
