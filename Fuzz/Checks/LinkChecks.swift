import Foundation
import IsletLinks
import IsletMessages

/// The properties the link fuzzer checks on every input, shared with the regression tests that
/// replay the inputs it found (Fuzz/LinkParser/regressions/).
///
/// The input is read in three ways: as a whole URL (any bytes, lossily decoded as UTF-8); as a
/// new value for one part of a valid signed link (the first byte picks which: one of the eight
/// `isl_` values, the app's path and query, or an extra query item); and as a splice into that
/// link at a position the first byte picks. For each, ``DeepLinkCodec`` must return a verdict
/// without trapping, and:
/// - a link that verifies signs back to a URL that verifies to the same link (round trip);
/// - a changed link that verifies means exactly what the original means (same base URL, target,
///   key and issue time): a change may only be one the codec normalises away (percent-encoding of
///   an Islet value, an empty `&&` item), never one that counts a tap somewhere else.
/// A violated property traps, which is what libFuzzer records as a crash.
public enum LinkChecks {
    static let key = try! LinkKey(id: "fz", secret: Array("the-fuzzing-key-is-at-least-32-bytes".utf8))
    static let keyring = LinkKeyring(signing: key)
    static let issued = Date(timeIntervalSince1970: 1_795_000_000)
    static let tapped = issued.addingTimeInterval(60)
    static let original = try! DeepLinkCodec.sign(
        baseURL: "fooddelivery://order/42?tab=status&q=%C3%A9",
        target: TapTarget(activityId: "order-42", attributesType: "DeliveryAttributes", surface: .islandExpanded, element: "eta", contentSequence: 7),
        issuedAt: issued, key: key)
    static let originalLink = try! DeepLinkCodec.verify(original, keyring: keyring, tappedAt: tapped, receivedAt: tapped).get()

    /// Checks one input; traps (`preconditionFailure`) when a property does not hold.
    public static func check(_ bytes: [UInt8]) {
        checkRoundTrip(String(decoding: bytes, as: UTF8.self))
        guard let first = bytes.first else { return }
        let rest = Array(bytes.dropFirst())
        checkChanged(replacing(part: Int(first) % 10, with: String(decoding: rest, as: UTF8.self)))
        let utf8 = Array(original.utf8)
        let position = Int(first) % (utf8.count + 1)
        checkChanged(String(decoding: Array(utf8[..<position]) + rest + Array(utf8[position...]), as: UTF8.self))
    }

    /// The original link with one part replaced: 0-7 an `isl_` value, 8 the app's URL before
    /// Islet's parameters, 9 an extra item appended to the query.
    static func replacing(part: Int, with value: String) -> String {
        let question = original.firstIndex(of: "?")!
        var items = original[original.index(after: question)...].split(separator: "&", omittingEmptySubsequences: false).map(String.init)
        let islet = items.indices.filter { items[$0].hasPrefix("isl_") }
        switch part {
        case 0..<8:
            let index = islet[part]
            items[index] = String(items[index].prefix { $0 != "=" }) + "=" + value
            return String(original[...question]) + items.joined(separator: "&")
        case 8:
            return value + "&" + islet.map { items[$0] }.joined(separator: "&")
        default:
            return original + "&" + value
        }
    }

    static func checkChanged(_ text: String) {
        if case .success(let link) = DeepLinkCodec.verify(text, keyring: keyring, tappedAt: tapped, receivedAt: tapped), link != originalLink {
            preconditionFailure("a changed link verified to another meaning: \(text.debugDescription)")
        }
        checkRoundTrip(text)
    }

    static func checkRoundTrip(_ url: String) {
        guard case .success(let link) = DeepLinkCodec.verify(url, keyring: keyring, tappedAt: tapped, receivedAt: tapped) else { return }
        guard let again = try? DeepLinkCodec.sign(baseURL: link.baseURL, target: link.target, issuedAt: link.issuedAt, key: key),
            case .success(let reverified) = DeepLinkCodec.verify(again, keyring: keyring, tappedAt: tapped, receivedAt: tapped), reverified == link
        else { preconditionFailure("a verified link does not sign back to itself: \(url.debugDescription)") }
    }
}
