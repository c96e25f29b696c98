import Crypto
import Foundation
import IsletMessages
import IsletTesting
import Testing
@testable import IsletLinks

private let k1 = try! LinkKey(id: "k1", secret: Array("the-first-link-key-at-least-32-bytes!".utf8))
private let k2 = try! LinkKey(id: "k2", secret: Array("the-second-link-key-at-least-32-byte!".utf8))
private let issued = Date(timeIntervalSince1970: 1_795_000_000)

extension SplitMix {
    mutating func identifier(_ maximum: Int) -> String {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._~-")
        return String((0..<Int.random(in: 1...maximum, using: &self)).map { _ in alphabet.randomElement(using: &self)! })
    }

    mutating func baseURL() -> String {
        let paths = ["order/42", "ride/abc-9", "score", "café/ünïcode", "a%20b/c", ""]
        let queries = ["", "tab=status", "x=1&y=%C3%A9", "q=a+b&empty=", "redirect=https%3A%2F%2Fexample.com%2F%3Fa%3D1"]
        let scheme = ["fooddelivery", "ride+app", "https"].randomElement(using: &self)!
        let host = scheme == "https" ? "example.com/" : ""
        let query = queries.randomElement(using: &self)!
        return "\(scheme)://\(host)\(paths.randomElement(using: &self)!)" + (query.isEmpty ? "" : "?" + query)
    }

    /// No app (a link signed before links named their app), a production app or a sandbox one.
    mutating func app() -> AppTarget? {
        let bundleIds = ["com.example.food", "com.example.ride-share", "io.x.Y9", "a.b"]
        switch Int.random(in: 0..<3, using: &self) {
        case 0: return nil
        case 1: return AppTarget(bundleId: bundleIds.randomElement(using: &self)!, environment: .production)
        default: return AppTarget(bundleId: bundleIds.randomElement(using: &self)!, environment: .sandbox)
        }
    }

    mutating func target() -> TapTarget {
        TapTarget(
            activityId: identifier(64), attributesType: ["DeliveryAttributes", "RideAttributes", "Score_v2"].randomElement(using: &self)!,
            surface: Surface.knownValues.randomElement(using: &self)!, element: identifier(20), contentSequence: Int64.random(in: 0...1_000_000, using: &self),
            app: app())
    }
}

@Suite("Signed widget links")
struct DeepLinkCodecTests {
    let keyring = LinkKeyring(signing: k2, accepted: [k1])

    @Test("signed links verify and give back their target, for 2,000 generated links and base URLs")
    func roundTrip() throws {
        var random = SplitMix(seed: 42)
        for _ in 0..<2_000 {
            let base = random.baseURL()
            let target = random.target()
            let url = try DeepLinkCodec.sign(baseURL: base, target: target, issuedAt: issued, key: k2)
            let verified = try DeepLinkCodec.verify(url, keyring: keyring, tappedAt: issued.addingTimeInterval(60), receivedAt: issued.addingTimeInterval(60)).get()
            #expect(verified.target == target)
            #expect(verified.keyId == "k2")
            #expect(verified.issuedAt == issued)
            #expect(verified.baseURL == base.replacingOccurrences(of: "?&", with: "?"), "\(url)")
        }
    }

    @Test("a query splits at the bytes ? & and =, as URL parsers read it, whatever Character a separator starts")
    func splitsAtBytes() throws {
        // U+0301 (a combining mark) joins the "&" or "=" before it into one Character; a URL parser
        // still splits there, and so does the codec.
        let (path, items) = DeepLinkCodec.split("app://p/\u{301}?a=1&\u{301}b=2&&c&")
        #expect(path == "app://p/\u{301}")
        #expect(items.map { Array($0.utf8) } == ["a=1", "\u{301}b=2", "c"].map { Array($0.utf8) })
        // A base URL with an item starting with the bytes isl_ is refused, whatever follows them.
        let target = TapTarget(activityId: "order-42", attributesType: "DeliveryAttributes", surface: .lockScreen, element: "eta", contentSequence: 7)
        #expect(throws: LinkError.self) { try DeepLinkCodec.sign(baseURL: "app://p?isl_\u{301}x=1", target: target, issuedAt: issued, key: k1) }
        // A signed link whose isl_ parameter gets a combining mark after its "=" no longer verifies.
        let url = try DeepLinkCodec.sign(baseURL: "app://p?tab=status", target: target, issuedAt: issued, key: k1)
        let respelled = url.replacingOccurrences(of: "isl_e=", with: "isl_e=\u{301}")
        #expect(respelled != url)
        guard case .failure(let rejection) = DeepLinkCodec.verify(respelled, keyring: keyring, tappedAt: issued, receivedAt: issued) else {
            Issue.record("a respelled link verified")
            return
        }
        #expect(rejection.reason == .invalidParameter)
    }

    @Test("a link is exactly what the format says: signatures computed independently (Python's hmac) match")
    func knownAnswers() throws {
        // Computed outside Swift: base64url(HMAC-SHA256(secret, canonical form)[0..<16]), no padding.
        let target = TapTarget(activityId: "order-42", attributesType: "DeliveryAttributes", surface: .lockScreen, element: "eta", contentSequence: 7)
        let common = "isl_a=order-42&isl_t=DeliveryAttributes&isl_s=lockScreen&isl_e=eta&isl_q=7&isl_i=1795000000&isl_k=k1"
        #expect(
            try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42?tab=status", target: target, issuedAt: issued, key: k1)
                == "fooddelivery://order/42?tab=status&\(common)&isl_sig=JrQcHO-eZBCe1Xfb-AoC1g")
        #expect(
            try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42", target: target, issuedAt: issued, key: k1)
                == "fooddelivery://order/42?\(common)&isl_sig=Ghy8OUYtWpQq20PC8StywA")
        // Naming the app: islet-link-v2, the app's value after the attributes type.
        var named = target
        named.app = AppTarget(bundleId: "com.example.food", environment: .production)
        #expect(
            try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42?tab=status", target: named, issuedAt: issued, key: k1)
                == "fooddelivery://order/42?tab=status&isl_a=order-42&isl_t=DeliveryAttributes&isl_p=com.example.food"
                + "&isl_s=lockScreen&isl_e=eta&isl_q=7&isl_i=1795000000&isl_k=k1&isl_sig=_uyUq2K28a6a-J2_nV-I4w")
        named.app = AppTarget(bundleId: "com.example.food", environment: .sandbox)
        #expect(
            try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42", target: named, issuedAt: issued, key: k1)
                == "fooddelivery://order/42?isl_a=order-42&isl_t=DeliveryAttributes&isl_p=com.example.food~sandbox"
                + "&isl_s=lockScreen&isl_e=eta&isl_q=7&isl_i=1795000000&isl_k=k1&isl_sig=PkKdK9_cjupTI3gJENTKSw")
    }

    @Test("base64url without padding, for every length up to 40 bytes", arguments: 0...40)
    func base64URL(length: Int) {
        var random = SplitMix(seed: UInt64(length))
        let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &random) }
        let expected = Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
        #expect(DeepLinkCodec.base64URLEncode(bytes) == expected)
        #expect(DeepLinkCodec.base64URLDecode(expected) == bytes)
    }

    @Test("a byte string has one base64url spelling: text with bits set past the last byte is refused")
    func base64URLIsCanonical() {
        let bytes = Array(0..<16).map(UInt8.init)
        let text = DeepLinkCodec.base64URLEncode(bytes)  // 22 characters: the last carries 2 bits and 4 zero bits
        let alphabet = DeepLinkCodec.base64URLAlphabet
        let last = alphabet.firstIndex(of: text.utf8.last!)!
        for extra in 1..<16 {
            #expect(DeepLinkCodec.base64URLDecode(String(text.dropLast()) + String(decoding: [alphabet[last | extra]], as: UTF8.self)) == nil)
        }
        for text in ["A", "AAAAA", "AB=", "AB+", "AB/", "AB C"] { #expect(DeepLinkCodec.base64URLDecode(text) == nil, "\(text)") }
    }

    @Test("percent decoding reads what Foundation's removingPercentEncoding reads, and refuses every byte sequence that is not UTF-8")
    func percentDecoding() {
        var samples = [
            "", "eta", "%65ta", "%", "%6", "%6g", "%zz", "a%2", "%C3%A9", "%c3%a9", "%C3", "%FF", "%00", "%2B+", "café",
            "%E2%82%AC", "%ED%A0%80", "%F0%9F%98%80", "%F4%90%80%80", "%C0%AF", "100%",
        ]
        var random = SplitMix(seed: 11)
        let pieces = ["a", "%", "%4", "%41", "%C3", "%A9", "%e2%82", "%AC", "é", "+", "%25", "%zz", "%0", "=", "&"]
        for _ in 0..<3_000 {
            samples.append((0..<Int.random(in: 0...6, using: &random)).map { _ in pieces.randomElement(using: &random)! }.joined())
        }
        for sample in samples {
            // Foundation on Linux turns some bytes that are not UTF-8 into U+FFFD (a lone %A9) and
            // refuses others (%AC, %FF); the codec refuses them all.
            let foundation = sample.removingPercentEncoding
            let expected = foundation?.unicodeScalars.contains("\u{FFFD}") == true ? nil : foundation
            #expect(DeepLinkCodec.percentDecoded(sample[...]) == expected, "\(sample)")
        }
        #expect(DeepLinkCodec.percentDecoded("%A9") == nil)
        #expect(DeepLinkCodec.percentDecoded("%EF%BF%BD") == "\u{FFFD}", "an encoded U+FFFD is UTF-8")
    }

    @Test("the MAC is computed over exactly the canonical form")
    func macOverCanonicalForm() throws {
        var random = SplitMix(seed: 7)
        for _ in 0..<200 {
            let base = random.baseURL()
            let target = random.target()
            let values = DeepLinkCodec.values(of: target, issuedAt: 1_795_000_000, keyId: "k2")
            let app = try target.app.map(DeepLinkCodec.appValue)
            let canonical = DeepLinkCodec.canonical(base: base, values: values, app: app)
            #expect(canonical.hasPrefix(app == nil ? "islet-link-v1\n" : "islet-link-v2\n"))
            let whole = HMAC<SHA256>.authenticationCode(for: Array(canonical.utf8), using: SymmetricKey(data: Array("the-second-link-key-at-least-32-byte!".utf8)))
            #expect(DeepLinkCodec.mac(base: base, values: values, app: app, key: k2) == Array(whole.prefix(16)))
        }
    }

    @Test("a signer's links, one per surface and element, are each link written out and signed over its whole canonical form")
    func signerLinks() throws {
        let secret = SymmetricKey(data: Array("the-second-link-key-at-least-32-byte!".utf8))
        var random = SplitMix(seed: 11)
        for _ in 0..<300 {
            let base = random.baseURL()
            let target = random.target()
            let signer = try LinkSigner(
                baseURL: base, activityId: target.activityId, attributesType: target.attributesType, contentSequence: target.contentSequence,
                issuedAt: issued, key: k2, app: target.app)
            for (surface, element) in Surface.knownValues.map({ ($0, "widget") }) + [(target.surface, target.element), (.minimal, random.identifier(64))] {
                // Written here from the format (docs/links.md), not by the codec.
                let (path, query) = base.firstIndex(of: "?").map { (String(base[..<$0]), String(base[base.index(after: $0)...])) } ?? (base, "")
                let theirs = query.split(separator: "&").joined(separator: "&")
                let canonicalBase = theirs.isEmpty ? path : path + "?" + theirs
                // The app, when there is one, after the type: its bundle id, ~sandbox after a sandbox one's.
                let app = target.app.map { $0.bundleId + ($0.environment == .sandbox ? "~sandbox" : "") }
                let values = [target.activityId, target.attributesType] + (app.map { [$0] } ?? [])
                    + [surface.rawValue, element, String(target.contentSequence), "1795000000", "k2"]
                let canonical = ([app == nil ? "islet-link-v1" : "islet-link-v2", canonicalBase] + values).joined(separator: "\n")
                let mac = HMAC<SHA256>.authenticationCode(for: Array(canonical.utf8), using: secret)
                let names = ["isl_a", "isl_t"] + (app == nil ? [] : ["isl_p"]) + ["isl_s", "isl_e", "isl_q", "isl_i", "isl_k", "isl_sig"]
                let parameters = zip(names, values + [DeepLinkCodec.base64URLEncode(Array(Array(mac).prefix(16)))]).map { "\($0)=\($1)" }
                let expected = canonicalBase + (theirs.isEmpty ? "?" : "&") + parameters.joined(separator: "&")
                #expect(try signer.sign(surface: surface, element: element) == expected)
                let one = TapTarget(
                    activityId: target.activityId, attributesType: target.attributesType, surface: surface, element: element,
                    contentSequence: target.contentSequence, app: target.app)
                #expect(try DeepLinkCodec.sign(baseURL: base, target: one, issuedAt: issued, key: k2) == expected)
            }
        }
    }

    @Test("changing any single parameter's value, or the base URL, or the signature is caught")
    func tampering() throws {
        var random = SplitMix(seed: 7)
        for _ in 0..<300 {
            let url = try DeepLinkCodec.sign(baseURL: random.baseURL(), target: random.target(), issuedAt: issued, key: k2)
            let items = url.split(separator: "?", maxSplits: 1)
            let (path, query) = (items[0], items.count > 1 ? String(items[1]) : "")
            var parts = query.split(separator: "&").map(String.init)
            let index = Int.random(in: 0..<parts.count, using: &random)
            let pair = parts[index].split(separator: "=", maxSplits: 1).map(String.init)
            let value = pair.count > 1 ? pair[1] : ""
            // A different value of the same kind, so that it still parses.
            var changed = value
            while changed == value {
                changed = value.allSatisfy(\.isNumber) && !value.isEmpty ? String(Int64(value)! + Int64.random(in: 1...5, using: &random)) : random.identifier(max(1, value.count))
            }
            if pair[0] == "isl_s" { changed = value == "minimal" ? "lockScreen" : "minimal" }
            if pair[0] == "isl_t" { changed = value == "RideAttributes" ? "DeliveryAttributes" : "RideAttributes" }
            if pair[0] == "isl_p" { changed = value.hasSuffix("~sandbox") ? String(value.dropLast(8)) : value + "~sandbox" }
            parts[index] = pair[0] + "=" + changed
            let tampered = String(path) + "?" + parts.joined(separator: "&")
            let result = DeepLinkCodec.verify(tampered, keyring: keyring, tappedAt: issued.addingTimeInterval(60), receivedAt: issued.addingTimeInterval(60))
            guard case .failure(let rejection) = result else {
                Issue.record("accepted a tampered link: \(tampered)")
                continue
            }
            let expected: [ClickRejectionReason] = [.badSignature, .unknownKeyId, .invalidParameter, .expired]
            #expect(expected.contains(rejection.reason), "\(rejection) for \(pair[0])")
        }
    }

    @Test("each rejection has its reason")
    func rejections() throws {
        let target = TapTarget(activityId: "order-42", attributesType: "DeliveryAttributes", surface: .islandExpanded, element: "eta", contentSequence: 7)
        let url = try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42?tab=status", target: target, issuedAt: issued, key: k2)
        func reason(_ link: String, at tap: Date = issued.addingTimeInterval(60), keyring: LinkKeyring? = nil) -> ClickRejectionReason? {
            if case .failure(let rejection) = DeepLinkCodec.verify(link, keyring: keyring ?? self.keyring, tappedAt: tap, receivedAt: tap) { return rejection.reason }
            return nil
        }
        #expect(reason(url) == nil)
        #expect(reason(url, at: issued.addingTimeInterval(12 * 3_600 + 1)) == .expired)
        // The age is the server's: a tap the phone dates within the 12 hours, received 3 days on.
        let late = DeepLinkCodec.verify(url, keyring: keyring, tappedAt: issued.addingTimeInterval(60), receivedAt: issued.addingTimeInterval(3 * 86_400))
        #expect((try? late.get()) == nil, "a link 3 days old is expired whatever tappedAt says")
        #expect(reason(url, at: issued.addingTimeInterval(-600)) == .invalidParameter, "issued after the tap")
        #expect(reason(url, keyring: LinkKeyring(signing: k1)) == .unknownKeyId, "k2 retired")
        #expect(reason(url.replacingOccurrences(of: "&isl_e=eta", with: "")) == .missingParameter)
        #expect(reason(url + "&isl_a=order-43") == .duplicateParameter)
        #expect(reason(url + "&isl_x=1") == .invalidParameter)
        #expect(reason(url.replacingOccurrences(of: "isl_q=7", with: "isl_q=seven")) == .invalidParameter)
        #expect(reason(url.replacingOccurrences(of: "isl_s=islandExpanded", with: "isl_s=watch")) == .invalidParameter)
        #expect(reason(url.replacingOccurrences(of: "tab=status", with: "tab=orders")) == .badSignature, "the base URL is signed too")
        #expect(reason(url.replacingOccurrences(of: "isl_k=k2", with: "isl_k=k1")) == .badSignature)
        // The same signature bytes spelled with a bit set past the last byte is not the signature.
        let signature = String(url[url.range(of: "isl_sig=")!.upperBound...])
        let alphabet = DeepLinkCodec.base64URLAlphabet
        let respelled = String(signature.dropLast()) + String(decoding: [alphabet[alphabet.firstIndex(of: signature.utf8.last!)! | 1]], as: UTF8.self)
        #expect(reason(url.replacingOccurrences(of: "isl_sig=" + signature, with: "isl_sig=" + respelled)) == .badSignature)
        #expect(reason(url + "#frag") == .malformedUrl)
        #expect(reason("not a url") == .malformedUrl)
        #expect(reason(String(repeating: "a", count: 5_000)) == .malformedUrl)
        #expect(reason(url.replacingOccurrences(of: "isl_e=eta", with: "isl_e=%ZZ")) == .invalidParameter)
        // Percent-encoding of our own values is read as the value.
        #expect(reason(url.replacingOccurrences(of: "isl_e=eta", with: "isl_e=%65ta")) == nil)
        // A parameter name smuggled in percent-encoded is the app's, so the base changed.
        #expect(reason(url + "&isl%5Fa=evil") == .badSignature)
        // Links of the old key still verify while it is accepted (rotation).
        let old = try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42", target: target, issuedAt: issued, key: k1)
        #expect(reason(old) == nil)
    }

    @Test("links that cannot be made are refused")
    func signingErrors() {
        let target = TapTarget(activityId: "a", attributesType: "T", surface: .minimal, element: "e", contentSequence: 1)
        #expect(throws: LinkError.self) { try DeepLinkCodec.sign(baseURL: "no-scheme", target: target, issuedAt: issued, key: k1) }
        #expect(throws: LinkError.self) { try DeepLinkCodec.sign(baseURL: "app://x#f", target: target, issuedAt: issued, key: k1) }
        #expect(throws: LinkError.self) { try DeepLinkCodec.sign(baseURL: "app://x?isl_a=1", target: target, issuedAt: issued, key: k1) }
        var bad = target
        bad.activityId = "a:b"
        #expect(throws: LinkError.self) { try DeepLinkCodec.sign(baseURL: "app://x", target: bad, issuedAt: issued, key: k1) }
        bad = target
        bad.surface = Surface(rawValue: "watch")
        #expect(throws: LinkError.self) { try DeepLinkCodec.sign(baseURL: "app://x", target: bad, issuedAt: issued, key: k1) }
        bad = target
        bad.element = "a b"
        #expect(throws: LinkError.self) { try DeepLinkCodec.sign(baseURL: "app://x", target: bad, issuedAt: issued, key: k1) }
        bad = target
        bad.contentSequence = -1
        #expect(throws: LinkError.self) { try DeepLinkCodec.sign(baseURL: "app://x", target: bad, issuedAt: issued, key: k1) }
        bad = target
        bad.attributesType = "9Lives"
        #expect(throws: LinkError.self) { try DeepLinkCodec.sign(baseURL: "app://x", target: bad, issuedAt: issued, key: k1) }
        #expect(throws: LinkError.self) { try LinkKey(id: "short", secret: Array("too short".utf8)) }
    }

    @Test("a link names its app and gives it back; a link signed before links named their app still verifies, naming none")
    func appInLink() throws {
        let food = AppTarget(bundleId: "com.example.food", environment: .production)
        let target = TapTarget(
            activityId: "order-42", attributesType: "DeliveryAttributes", surface: .lockScreen, element: "status", contentSequence: 7, app: food)
        let url = try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42?tab=status", target: target, issuedAt: issued, key: k2)
        #expect(url.contains("&isl_p=com.example.food&"))
        let verified = try DeepLinkCodec.verify(url, keyring: keyring, tappedAt: issued, receivedAt: issued).get()
        #expect(verified.target == target)
        #expect(verified.target.app == food)

        var sandbox = target
        sandbox.app = AppTarget(bundleId: "com.example.food", environment: .sandbox)
        let sandboxURL = try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42?tab=status", target: sandbox, issuedAt: issued, key: k2)
        #expect(sandboxURL.contains("&isl_p=com.example.food~sandbox&"))
        #expect(try DeepLinkCodec.verify(sandboxURL, keyring: keyring, tappedAt: issued, receivedAt: issued).get().target.app == sandbox.app)

        // A link as phones hold it from before (written out here, signed over islet-link-v1).
        var old = target
        old.app = nil
        let oldURL = "fooddelivery://order/42?tab=status&isl_a=order-42&isl_t=DeliveryAttributes&isl_s=lockScreen&isl_e=eta&isl_q=7"
            + "&isl_i=1795000000&isl_k=k1&isl_sig=JrQcHO-eZBCe1Xfb-AoC1g"
        let oldLink = try DeepLinkCodec.verify(oldURL, keyring: keyring, tappedAt: issued, receivedAt: issued).get()
        #expect(oldLink.target.app == nil)
        #expect(oldLink.target.element == "eta")
        #expect(try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42?tab=status", target: old, issuedAt: issued, key: k2).contains("isl_p") == false)
    }

    @Test("an app changed, respelled, removed or added is refused", arguments: [
        ("isl_p=com.example.food&", "isl_p=com.example.ride&", ClickRejectionReason.badSignature),
        ("isl_p=com.example.food&", "isl_p=com.example.Food&", .badSignature),
        ("isl_p=com.example.food&", "isl_p=com.example.food~sandbox&", .badSignature),
        // Another spelling of the same app is not the app's value: one spelling only.
        ("isl_p=com.example.food&", "isl_p=com.example.food~production&", .invalidParameter),
        ("isl_p=com.example.food&", "isl_p=com.example.food~&", .invalidParameter),
        ("isl_p=com.example.food&", "isl_p=~sandbox&", .invalidParameter),
        ("isl_p=com.example.food&", "isl_p=food&", .invalidParameter),
        ("isl_p=com.example.food&", "isl_p=&", .invalidParameter),
        ("isl_p=com.example.food&", "isl_p=com.example.food&isl_p=com.example.food&", .duplicateParameter),
        // Removed: what is left is signed over islet-link-v2, not v1.
        ("isl_p=com.example.food&", "", .badSignature),
    ])
    func appTampering(original: String, replacement: String, reason: ClickRejectionReason) throws {
        let target = TapTarget(
            activityId: "order-42", attributesType: "DeliveryAttributes", surface: .lockScreen, element: "status", contentSequence: 7,
            app: AppTarget(bundleId: "com.example.food", environment: .production))
        let url = try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42?tab=status", target: target, issuedAt: issued, key: k2)
        let tampered = url.replacingOccurrences(of: original, with: replacement)
        #expect(tampered != url)
        guard case .failure(let rejection) = DeepLinkCodec.verify(tampered, keyring: keyring, tappedAt: issued, receivedAt: issued) else {
            Issue.record("accepted \(tampered)")
            return
        }
        #expect(rejection.reason == reason, "\(rejection)")
    }

    @Test("an app added to a link that named none is refused; the app's value percent-encoded is the same link")
    func appAddedOrEncoded() throws {
        let target = TapTarget(activityId: "order-42", attributesType: "DeliveryAttributes", surface: .lockScreen, element: "status", contentSequence: 7)
        let old = try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42", target: target, issuedAt: issued, key: k2)
        for added in [old + "&isl_p=com.example.food", old.replacingOccurrences(of: "&isl_s=", with: "&isl_p=com.example.food&isl_s=")] {
            guard case .failure(let rejection) = DeepLinkCodec.verify(added, keyring: keyring, tappedAt: issued, receivedAt: issued) else {
                Issue.record("accepted \(added)")
                continue
            }
            #expect(rejection.reason == .badSignature, "\(rejection)")
        }
        // Percent-encoding is read away from every Islet value (docs/links.md): the same link, the
        // same identity, the same app.
        var named = target
        named.app = AppTarget(bundleId: "com.example.food", environment: .sandbox)
        let url = try DeepLinkCodec.sign(baseURL: "fooddelivery://order/42", target: named, issuedAt: issued, key: k2)
        let encoded = url.replacingOccurrences(of: "isl_p=com.example.food~sandbox", with: "isl_p=com%2Eexample.food%7Esandbox")
        #expect(encoded != url)
        let plain = try DeepLinkCodec.verify(url, keyring: keyring, tappedAt: issued, receivedAt: issued).get()
        let reread = try DeepLinkCodec.verify(encoded, keyring: keyring, tappedAt: issued, receivedAt: issued).get()
        #expect(reread == plain)
        #expect(reread.identity == plain.identity)
    }

    @Test("an app links cannot name is refused at signing")
    func appSigningErrors() {
        let target = TapTarget(activityId: "a", attributesType: "T", surface: .minimal, element: "e", contentSequence: 1)
        for app in [
            AppTarget(bundleId: "food", environment: .production), AppTarget(bundleId: "com.example.food~sandbox", environment: .production),
            AppTarget(bundleId: "com.example.food", environment: APNsEnvironment(rawValue: "staging")),
        ] {
            var bad = target
            bad.app = app
            #expect(throws: LinkError.self) { try DeepLinkCodec.sign(baseURL: "app://x", target: bad, issuedAt: issued, key: k1) }
        }
    }

    @Test("constant-time comparison compares whole values")
    func constantTime() {
        #expect(DeepLinkCodec.constantTimeEqual([1, 2, 3], [1, 2, 3]))
        #expect(!DeepLinkCodec.constantTimeEqual([1, 2, 3], [1, 2, 4]))
        #expect(!DeepLinkCodec.constantTimeEqual([1, 2, 3], [1, 2]))
    }
}
