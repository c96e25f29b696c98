import Crypto
import Foundation
import IsletMessages

/// Signs the links of one content: one base URL, activity, attributes type, app, content sequence,
/// time and key, links differing only in their surface and element (a payload has a link per
/// surface and per linked element). What they share is checked, written and hashed once: the link's
/// text up to `isl_s=`, and the HMAC over the canonical form up to the surface, which each link's
/// MAC goes on from.
public struct LinkSigner: Sendable {
    /// The link up to the surface's value (`…&isl_t=DeliveryAttributes&isl_p=com.example.food&isl_s=`).
    private let head: String
    /// From the element's value on to the signature's (`&isl_q=7&isl_i=…&isl_k=k2&isl_sig=`).
    private let tail: String
    /// The canonical form after the element (`\n7\n1795000000\nk2`).
    private let canonicalTail: [UInt8]
    /// The key's HMAC, fed the canonical form up to the surface.
    private let mac: HMAC<SHA256>

    /// - Parameter app: the app the content is for, named in every link (`isl_p`); `nil` signs
    ///   links as they were before links named their app (for tests and tools that make such links).
    public init(
        baseURL: String, activityId: String, attributesType: String, contentSequence: Int64, issuedAt: Date, key: LinkKey, app: AppTarget? = nil
    ) throws(LinkError) {
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
        let appValue = try app.map { app throws(LinkError) in try DeepLinkCodec.appValue(app) }
        let base = items.isEmpty ? String(path) : String(path) + "?" + items.joined(separator: "&")
        let (sequence, issued) = (String(contentSequence), String(Int64(issuedAt.timeIntervalSince1970.rounded(.down))))
        var head = base + (items.isEmpty ? "?" : "&") + "isl_a=" + activityId + "&isl_t=" + attributesType
        if let appValue { head += "&isl_p=" + appValue }
        self.head = head + "&isl_s="
        tail = "&isl_q=" + sequence + "&isl_i=" + issued + "&isl_k=" + key.id + "&isl_sig="
        canonicalTail = Array(("\n" + sequence + "\n" + issued + "\n" + key.id).utf8)
        // The canonical form up to the surface: version, base, activity, type, and the app if any.
        var canonicalHead = DeepLinkCodec.version(app: appValue) + "\n" + base + "\n" + activityId + "\n" + attributesType + "\n"
        if let appValue { canonicalHead += appValue + "\n" }
        var mac = key.mac
        mac.update(data: Array(canonicalHead.utf8))
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
