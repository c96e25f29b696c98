/// A language tag (BCP 47) as the registry keeps it and templates name their languages:
/// `zh-Hans-CN`, `en`, `pt-BR`. Apple's locale identifiers (`zh_Hans_CN`) are taken too.
///
/// Only the shape is checked (a language of 2–3 letters, then subtags of 1–8 letters or digits),
/// not the registry of languages: a tag no template knows falls back to the template's default
/// texts. Case is made canonical (`zh-hans-cn` → `zh-Hans-CN`): language lowercase, a four-letter
/// script titlecase, a two-letter region uppercase.
public struct LanguageTag: Sendable, Hashable, CustomStringConvertible {
    /// The canonical spelling.
    public let description: String

    /// Longest tag accepted (in bytes).
    public static let maximumLength = 35

    public init?(_ text: String) {
        guard !text.isEmpty, text.utf8.count <= Self.maximumLength else { return nil }
        let subtags = text.split(separator: "-", omittingEmptySubsequences: false).flatMap {
            $0.split(separator: "_", omittingEmptySubsequences: false)
        }
        guard let language = subtags.first, (2...3).contains(language.count), language.allSatisfy(\.isASCIILetter) else { return nil }
        var canonical = [language.lowercased()]
        for (index, subtag) in subtags.dropFirst().enumerated() {
            guard (1...8).contains(subtag.count), subtag.allSatisfy({ $0.isASCIILetter || $0.isASCIIDigit }) else { return nil }
            if index == 0, subtag.count == 4, subtag.allSatisfy(\.isASCIILetter) {
                canonical.append(subtag.prefix(1).uppercased() + subtag.dropFirst().lowercased())  // script
            } else if subtag.count == 2, subtag.allSatisfy(\.isASCIILetter) {
                canonical.append(subtag.uppercased())  // region
            } else {
                canonical.append(subtag.lowercased())
            }
        }
        description = canonical.joined(separator: "-")
    }

    /// The tags to look for, most specific first: the tag, then with its last subtag removed, and
    /// so on down to the language (`zh-Hans-CN`, `zh-Hans`, `zh`). Chinese without a script gets the
    /// script its region writes in after the tag itself (`zh-CN` → `zh-CN`, `zh-Hans-CN`, `zh-Hans`,
    /// `zh`; `zh-TW`, `zh-HK` and `zh-MO` → `zh-Hant-…`), as CLDR's likely subtags have it.
    public var fallbacks: [String] {
        var subtags = description.split(separator: "-").map(String.init)
        var tags: [String] = []
        if subtags[0] == "zh", subtags.count == 1 || subtags[1].count != 4 {
            if subtags.count > 1 { tags.append(description) }
            let region = subtags.count > 1 ? subtags[1] : ""
            subtags.insert(["TW", "HK", "MO"].contains(region) ? "Hant" : "Hans", at: 1)
        }
        while !subtags.isEmpty {
            tags.append(subtags.joined(separator: "-"))
            subtags.removeLast()
        }
        return tags
    }
}

extension Character {
    fileprivate var isASCIILetter: Bool { isASCII && isLetter }
    fileprivate var isASCIIDigit: Bool { isASCII && isNumber }
}
