import Crypto
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

/// A key links are signed with: an id (carried in the link) and a secret of at least 32 bytes.
public struct LinkKey: Sendable {
    public let id: String
    /// HMAC-SHA256 with this key and no message yet: each signature starts from a copy (the key's
    /// padding is hashed once, not per link).
    let mac: HMAC<SHA256>

    public init(id: String, secret: [UInt8]) throws(LinkError) {
        guard DeepLinkCodec.isIdentifier(id, maxLength: 32) else {
            throw LinkError("a link key id must be 1-32 characters of letters, digits and . _ ~ -, got \"\(id.prefix(40))\"")
        }
        guard secret.count >= 32 else { throw LinkError("the secret of link key \(id) must be at least 32 bytes") }
        self.id = id
        self.mac = HMAC<SHA256>(key: SymmetricKey(data: secret))
    }
}

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

/// A link that verified: what was tapped, signed by which key, when.
public struct VerifiedLink: Sendable, Equatable {
    public var target: TapTarget
    public var keyId: String
    public var issuedAt: Date
    /// The app's own URL, without Islet's parameters.
    public var baseURL: String
    /// The link's 16 signature bytes. With ``keyId`` they name the link however its text was
    /// spelled: the signature covers the link's canonical form, and it has one spelling only.
    public var signature: [UInt8]

    /// The link's identity, the same for every spelling of it: the key id and the signature, hex.
    public var identity: String { keyId + ":" + DeepLinkCodec.hex(signature) }
}

/// Why a link did not verify: the reason analytics-ingest reports, and a detail naming the
/// parameter or check at fault.
public struct LinkRejection: Error, Sendable, Equatable, CustomStringConvertible {
    public var reason: ClickRejectionReason
    public var detail: String

    public init(_ reason: ClickRejectionReason, _ detail: String) {
        self.reason = reason
        self.detail = detail
    }

    public var description: String { "\(reason.rawValue): \(detail)" }
}

/// A link that cannot be made (a bad base URL or target).
public struct LinkError: Error, Sendable, Equatable, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}

/// Signs and verifies the analytics parameters of widget links (`widgetURL`, `Link`).
///
/// content-service appends to the app's own URL:
///
/// ```
/// fooddelivery://order/42?tab=status&isl_a=order-42&isl_t=DeliveryAttributes&isl_s=lockScreen
///     &isl_e=eta&isl_q=7&isl_i=1795000000&isl_k=k2&isl_sig=Qm9vbV9zaWduYXR1cmUx
/// ```
///
/// | parameter | value |
/// | --- | --- |
/// | `isl_a` | activity id |
/// | `isl_t` | attributes type |
/// | `isl_s` | surface: `lockScreen`, `islandExpanded`, `compactLeading`, `compactTrailing`, `minimal` |
/// | `isl_e` | element id |
/// | `isl_q` | content sequence |
/// | `isl_i` | issued at, epoch seconds |
/// | `isl_k` | key id |
/// | `isl_sig` | the first 16 bytes of HMAC-SHA256 over the canonical form, base64url without padding |
///
/// The canonical form is `islet-link-v1`, the base URL (the link without Islet's parameters, its
/// other query parameters in their order), then the seven values, separated by newlines — so the
/// parameters cannot be moved to another URL, reordered into another meaning, or changed.
public enum DeepLinkCodec {
    /// How long after it was issued a link counts a tap.
    public static let maximumAge: TimeInterval = 12 * 3_600
    /// Clock skew tolerated between the signing service and the phone.
    public static let clockSkew: TimeInterval = 300

    static let prefix = "isl_"
    static let names = ["isl_a", "isl_t", "isl_s", "isl_e", "isl_q", "isl_i", "isl_k", "isl_sig"]

    /// The app's URL with the signed analytics parameters appended.
    public static func sign(baseURL: String, target: TapTarget, issuedAt: Date, key: LinkKey) throws(LinkError) -> String {
        try LinkSigner(
            baseURL: baseURL, activityId: target.activityId, attributesType: target.attributesType, contentSequence: target.contentSequence,
            issuedAt: issuedAt, key: key
        ).sign(surface: target.surface, element: target.element)
    }

    /// Verifies a link as the app received it, for a tap the phone says it made at `tappedAt` and
    /// that reached Islet at `receivedAt`. The link's age is judged by the server's clock
    /// (`receivedAt`): a phone's clock, or a `tappedAt` it sends, cannot revive an old link.
    public static func verify(_ url: String, keyring: LinkKeyring, tappedAt: Date, receivedAt: Date) -> Result<VerifiedLink, LinkRejection> {
        guard url.utf8.count <= 4_096 else { return .failure(LinkRejection(.malformedUrl, "longer than 4096 bytes")) }
        guard let schemeEnd = url.utf8.firstIndex(of: UInt8(ascii: ":")), schemeEnd != url.utf8.startIndex,
            url.utf8[..<schemeEnd].allSatisfy(isSchemeByte)
        else {
            return .failure(LinkRejection(.malformedUrl, "no URL scheme"))
        }
        guard !url.utf8.contains(UInt8(ascii: "#")) else { return .failure(LinkRejection(.malformedUrl, "a fragment is not part of an Islet link")) }
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
                return .failure(LinkRejection(.invalidParameter, "unknown parameter \(name.prefix(20))"))
            }
            guard ours[slot] == nil else { return .failure(LinkRejection(.duplicateParameter, "\(names[slot]) appears more than once")) }
            guard let equals, let value = percentDecoded(Substring(item.utf8[item.utf8.index(after: equals)...])) else {
                return .failure(LinkRejection(.invalidParameter, "\(names[slot]) has no readable value"))
            }
            ours[slot] = value
        }
        for (slot, name) in names.enumerated() where ours[slot] == nil { return .failure(LinkRejection(.missingParameter, "\(name) is missing")) }
        let values = ours.map { $0! }
        let base = theirs.isEmpty ? String(path) : String(path) + "?" + theirs.joined(separator: "&")

        // The fields, checked before the signature so that a broken link says what is broken.
        let (activityId, attributesType, surfaceText, element) = (values[0], values[1], values[2], values[3])
        guard isIdentifier(activityId, maxLength: 128) else { return .failure(LinkRejection(.invalidParameter, "isl_a is not an activity id")) }
        guard isTypeName(attributesType) else { return .failure(LinkRejection(.invalidParameter, "isl_t is not a type name")) }
        let surface = Surface(rawValue: surfaceText)
        guard surface.isKnown else { return .failure(LinkRejection(.invalidParameter, "isl_s is not a known surface")) }
        guard isIdentifier(element, maxLength: 64) else { return .failure(LinkRejection(.invalidParameter, "isl_e is not an element id")) }
        guard let sequence = decimal(values[4]), sequence >= 0 else {
            return .failure(LinkRejection(.invalidParameter, "isl_q is not a content sequence"))
        }
        guard let issued = decimal(values[5]) else { return .failure(LinkRejection(.invalidParameter, "isl_i is not a time")) }
        guard let key = keyring.key(id: values[6]) else {
            return .failure(LinkRejection(.unknownKeyId, "key \(values[6].prefix(32)) is not one of the accepted keys"))
        }
        guard let given = base64URLDecode(values[7]), given.count == 16 else {
            return .failure(LinkRejection(.badSignature, "isl_sig is not a 16-byte base64url value"))
        }
        let expected = mac(base: base, values: values.dropLast(), key: key)
        guard constantTimeEqual(given, expected) else { return .failure(LinkRejection(.badSignature, "the signature does not match")) }

        let issuedAt = Date(timeIntervalSince1970: TimeInterval(issued))
        guard issuedAt <= tappedAt.addingTimeInterval(clockSkew) else {
            return .failure(LinkRejection(.invalidParameter, "issued after the tap"))
        }
        guard receivedAt.timeIntervalSince(issuedAt) <= maximumAge else {
            return .failure(LinkRejection(.expired, "issued more than 12 hours before the tap reached Islet"))
        }
        return .success(
            VerifiedLink(
                target: TapTarget(activityId: activityId, attributesType: attributesType, surface: surface, element: element, contentSequence: sequence),
                keyId: key.id, issuedAt: issuedAt, baseURL: base, signature: given))
    }

    // MARK: Pieces

    /// Lower-case hex of `bytes`.
    public static func hex(_ bytes: some Sequence<UInt8>) -> String { Hex.lowercase(Array(bytes)) }

    static func values(of target: TapTarget, issuedAt: Int64, keyId: String) -> [String] {
        [target.activityId, target.attributesType, target.surface.rawValue, target.element, String(target.contentSequence), String(issuedAt), keyId]
    }

    static func canonical(base: String, values: [String]) -> String {
        (["islet-link-v1", base] + values).joined(separator: "\n")
    }

    /// The first 16 bytes of HMAC-SHA256 over the canonical form: the same bytes as
    /// `canonical(base:values:)`, gathered into one buffer (each `update` call costs more than
    /// copying a few hundred bytes).
    static func mac(base: String, values: some Collection<String>, key: LinkKey) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(base.utf8.count + values.reduce(0) { $0 + $1.utf8.count } + 24)
        bytes.append(contentsOf: "islet-link-v1\n".utf8)
        bytes.append(contentsOf: base.utf8)
        for value in values {
            bytes.append(UInt8(ascii: "\n"))
            bytes.append(contentsOf: value.utf8)
        }
        var mac = key.mac
        mac.update(data: bytes)
        return Array(mac.finalize().prefix(16))
    }

    /// The part before the query, and the query's items (empty ones dropped).
    ///
    /// Split at the bytes "?" and "&", as URL parsers read a query: a Character-wise split walked
    /// every grapheme cluster of the link (it showed in analytics-ingest's profile), and would not
    /// split at an "&" followed by a combining mark, which no URL parser joins to it.
    static func split(_ url: String) -> (path: Substring, items: [Substring]) {
        let bytes = url.utf8
        guard let questionMark = bytes.firstIndex(of: UInt8(ascii: "?")) else { return (url[...], []) }
        var items: [Substring] = []
        var start = bytes.index(after: questionMark)
        var index = start
        while index != bytes.endIndex {
            if bytes[index] == UInt8(ascii: "&") {
                if index != start { items.append(Substring(bytes[start..<index])) }
                start = bytes.index(after: index)
            }
            index = bytes.index(after: index)
        }
        if start != bytes.endIndex { items.append(Substring(bytes[start...])) }
        return (Substring(bytes[..<questionMark]), items)
    }

    /// Whether a query item (or its name) is one of Islet's parameters: it starts with the bytes
    /// `isl_`, whatever follows.
    static func isOurs(_ item: Substring) -> Bool {
        item.utf8.starts(with: prefix.utf8)
    }

    static func isIdentifier(_ text: String, maxLength: Int) -> Bool {
        let bytes = text.utf8
        return !bytes.isEmpty && bytes.count <= maxLength && bytes.allSatisfy { isAlphanumeric($0) || "._~-".utf8.contains($0) }
    }

    static func isTypeName(_ text: String) -> Bool {
        let bytes = Array(text.utf8)
        guard let first = bytes.first, bytes.count <= 100, !(UInt8(ascii: "0")...UInt8(ascii: "9")).contains(first) else { return false }
        return bytes.allSatisfy { isAlphanumeric($0) || $0 == UInt8(ascii: "_") }
    }

    private static func decimal(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
        return Int64(text)
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }

    private static func isSchemeByte(_ byte: UInt8) -> Bool {
        isAlphanumeric(byte) || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "-") || byte == UInt8(ascii: ".")
    }

    /// Compares in time that depends only on the length, not on where the bytes differ.
    static func constantTimeEqual(_ a: [UInt8], _ b: [UInt8]) -> Bool {
        guard a.count == b.count else { return false }
        var difference: UInt8 = 0
        for i in a.indices { difference |= a[i] ^ b[i] }
        return difference == 0
    }

    /// Base64url (RFC 4648 §5) without padding.
    static let base64URLAlphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_".utf8)

    static func base64URLEncode(_ bytes: [UInt8]) -> String {
        let alphabet = base64URLAlphabet
        var output: [UInt8] = []
        output.reserveCapacity((bytes.count * 4 + 2) / 3)
        var index = 0
        while index < bytes.count {
            let remaining = bytes.count - index
            let chunk = UInt32(bytes[index]) << 16 | (remaining > 1 ? UInt32(bytes[index + 1]) << 8 : 0) | (remaining > 2 ? UInt32(bytes[index + 2]) : 0)
            for position in 0..<min(remaining + 1, 4) { output.append(alphabet[Int(chunk >> (18 - 6 * UInt32(position)) & 0x3F)]) }
            index += 3
        }
        return String(decoding: output, as: UTF8.self)
    }

    /// Strict: only the alphabet, no padding, and the bits left over after the last whole byte
    /// are zero, so one byte string has exactly one text (a signature cannot be re-spelled).
    static func base64URLDecode(_ text: String) -> [UInt8]? {
        let bytes = text.utf8
        guard bytes.count % 4 != 1 else { return nil }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count * 3 / 4)
        var accumulator: UInt32 = 0
        var bits: UInt32 = 0
        for byte in bytes {
            let value = base64URLValues[Int(byte)]
            guard value != 0xFF else { return nil }
            accumulator = accumulator << 6 | UInt32(value)
            bits += 6
            if bits >= 8 {
                bits -= 8
                output.append(UInt8(truncatingIfNeeded: accumulator >> bits))
                accumulator &= (1 << bits) - 1
            }
        }
        return accumulator == 0 ? output : nil
    }

    /// Each byte's position in the alphabet; 0xFF for a byte outside it.
    private static let base64URLValues: [UInt8] = {
        var values = [UInt8](repeating: 0xFF, count: 256)
        for (value, byte) in base64URLAlphabet.enumerated() { values[Int(byte)] = UInt8(value) }
        return values
    }()

    /// Percent-decoding on bytes, as Foundation's `removingPercentEncoding` (which showed in
    /// profiles): nil when a `%` is not followed by two hex digits or when the decoded bytes are not
    /// UTF-8 (Foundation on Linux turns some of those into U+FFFD); `+` stays `+`.
    static func percentDecoded(_ text: Substring) -> String? {
        let bytes = text.utf8
        guard bytes.contains(UInt8(ascii: "%")) else { return String(text) }
        var output: [UInt8] = []
        output.reserveCapacity(bytes.count)
        var index = bytes.startIndex
        while index != bytes.endIndex {
            let byte = bytes[index]
            index = bytes.index(after: index)
            guard byte == UInt8(ascii: "%") else {
                output.append(byte)
                continue
            }
            guard index != bytes.endIndex, let high = hexValue(bytes[index]) else { return nil }
            index = bytes.index(after: index)
            guard index != bytes.endIndex, let low = hexValue(bytes[index]) else { return nil }
            index = bytes.index(after: index)
            output.append(high << 4 | low)
        }
        return String(validating: output, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}

/// Signs the links of one content: one base URL, activity, attributes type, content sequence, time
/// and key, links differing only in their surface and element (a payload has a link per surface
/// and per linked element). What they share is checked, written and hashed once: the link's text up
/// to `isl_s=`, and the HMAC over the canonical form up to the surface, which each link's MAC goes
/// on from.
public struct LinkSigner: Sendable {
    /// The link up to the surface's value (`…&isl_t=DeliveryAttributes&isl_s=`).
    private let head: String
    /// From the element's value on to the signature's (`&isl_q=7&isl_i=…&isl_k=k2&isl_sig=`).
    private let tail: String
    /// The canonical form after the element (`\n7\n1795000000\nk2`).
    private let canonicalTail: [UInt8]
    /// The key's HMAC, fed the canonical form up to the surface.
    private let mac: HMAC<SHA256>

    public init(baseURL: String, activityId: String, attributesType: String, contentSequence: Int64, issuedAt: Date, key: LinkKey) throws(LinkError) {
        guard let schemeEnd = baseURL.utf8.firstIndex(of: UInt8(ascii: ":")), schemeEnd != baseURL.utf8.startIndex,
            !baseURL.utf8.contains(UInt8(ascii: "#"))
        else {
            throw LinkError("the base URL must have a scheme and no fragment: \(baseURL.prefix(80))")
        }
        let (path, items) = DeepLinkCodec.split(baseURL)
        guard !items.contains(where: DeepLinkCodec.isOurs) else {
            throw LinkError("the base URL already has parameters starting with \(DeepLinkCodec.prefix)")
        }
        guard DeepLinkCodec.isIdentifier(activityId, maxLength: 128), !activityId.utf8.contains(UInt8(ascii: ":")) else {
            throw LinkError("activity id \(activityId.prefix(40)) is not a link identifier")
        }
        guard DeepLinkCodec.isTypeName(attributesType), contentSequence >= 0 else {
            throw LinkError("links cannot carry attributes type \(attributesType.prefix(40)) or content sequence \(contentSequence)")
        }
        let base = items.isEmpty ? String(path) : String(path) + "?" + items.joined(separator: "&")
        let (sequence, issued) = (String(contentSequence), String(Int64(issuedAt.timeIntervalSince1970.rounded(.down))))
        head = base + (items.isEmpty ? "?" : "&") + "isl_a=" + activityId + "&isl_t=" + attributesType + "&isl_s="
        tail = "&isl_q=" + sequence + "&isl_i=" + issued + "&isl_k=" + key.id + "&isl_sig="
        canonicalTail = Array(("\n" + sequence + "\n" + issued + "\n" + key.id).utf8)
        var mac = key.mac
        mac.update(data: Array(("islet-link-v1\n" + base + "\n" + activityId + "\n" + attributesType + "\n").utf8))
        self.mac = mac
    }

    /// The link of one surface and element (`widget` for the whole view).
    public func sign(surface: Surface, element: String) throws(LinkError) -> String {
        guard surface.isKnown, DeepLinkCodec.isIdentifier(element, maxLength: 64) else {
            throw LinkError("links cannot carry surface \(surface.rawValue.prefix(40)) or element \(element.prefix(70))")
        }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(surface.rawValue.utf8.count + element.utf8.count + canonicalTail.count + 1)
        bytes.append(contentsOf: surface.rawValue.utf8)
        bytes.append(UInt8(ascii: "\n"))
        bytes.append(contentsOf: element.utf8)
        bytes.append(contentsOf: canonicalTail)
        var mac = self.mac
        mac.update(data: bytes)
        let signature = DeepLinkCodec.base64URLEncode(Array(mac.finalize().prefix(16)))
        var link = head
        link.reserveCapacity(head.utf8.count + surface.rawValue.utf8.count + element.utf8.count + tail.utf8.count + signature.utf8.count)
        link += surface.rawValue
        link += "&isl_e="
        link += element
        link += tail
        link += signature
        return link
    }
}
