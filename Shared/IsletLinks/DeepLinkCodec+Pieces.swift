import Crypto
import Foundation
import IsletMessages

// The pieces links are made of and read with: the canonical form and its MAC, the query split at
// bytes, identifiers, base64url and percent-decoding.
extension DeepLinkCodec {
    /// Lower-case hex of `bytes`.
    public static func hex(_ bytes: some Sequence<UInt8>) -> String { Hex.lowercase(Array(bytes)) }

    /// The seven values of `target`'s link other than its app, in the order of ``names``.
    static func values(of target: TapTarget, issuedAt: Int64, keyId: String) -> [String] {
        [target.activityId, target.attributesType, target.surface.rawValue, target.element, String(target.contentSequence), String(issuedAt), keyId]
    }

    /// The first line of a link's canonical form: `islet-link-v1` for a link without an app,
    /// `islet-link-v2` for one naming its app.
    static func version(app: String?) -> String { app == nil ? "islet-link-v1" : "islet-link-v2" }

    /// A link's canonical form: its ``version(app:)``, the base URL, then the seven `values`
    /// (`isl_a` … `isl_k`, in the order of ``names``) with the app's value, if any, after the
    /// attributes type; one per line.
    static func canonical(base: String, values: [String], app: String?) -> String {
        var lines = values
        if let app { lines.insert(app, at: 2) }
        return ([version(app: app), base] + lines).joined(separator: "\n")
    }

    /// The first 16 bytes of HMAC-SHA256 over the canonical form: the same bytes as
    /// `canonical(base:values:app:)`, gathered into one buffer (each `update` call costs more
    /// than copying a few hundred bytes).
    static func mac(base: String, values: some Collection<String>, app: String?, key: LinkKey) -> [UInt8] {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(base.utf8.count + values.reduce(0) { $0 + $1.utf8.count } + (app?.utf8.count ?? 0) + 24)
        bytes.append(contentsOf: version(app: app).utf8)
        bytes.append(UInt8(ascii: "\n"))
        bytes.append(contentsOf: base.utf8)
        for (index, value) in values.enumerated() {
            if index == 2, let app {
                bytes.append(UInt8(ascii: "\n"))
                bytes.append(contentsOf: app.utf8)
            }
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

    static func decimal(_ text: String) -> Int64? {
        guard !text.isEmpty, text.utf8.count <= 18, text.utf8.allSatisfy({ (UInt8(ascii: "0")...UInt8(ascii: "9")).contains($0) }) else { return nil }
        return Int64(text)
    }

    private static func isAlphanumeric(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte)
            || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }

    static func isSchemeByte(_ byte: UInt8) -> Bool {
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
