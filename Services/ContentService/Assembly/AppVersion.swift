/// An app's `CFBundleShortVersionString`, compared number by number (5.10 > 5.9).
public struct AppVersion: Sendable, Comparable, CustomStringConvertible, Decodable {
    /// The version of an app Islet does not know (a broadcast, for every phone; an activity whose
    /// token is not read yet): newer than any, so every field is sent (an app ignores a field it
    /// does not know; a missing one would break its decoding); an enum's case only when every app
    /// with the field decodes it.
    public static let unknown = AppVersion("999999")!

    public let parts: [Int]

    public init?(_ text: String) {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false).map { Int($0) }
        guard !parts.isEmpty, parts.count <= 4, parts.allSatisfy({ $0 != nil && $0! >= 0 }) else { return nil }
        self.parts = parts.map { $0! }
    }

    public init(from decoder: any Decoder) throws {
        let text = try decoder.singleValueContainer().decode(String.self)
        guard let version = AppVersion(text) else {
            throw DecodingError.dataCorrupted(.init(codingPath: decoder.codingPath, debugDescription: "not an app version: \(text)"))
        }
        self = version
    }

    public static func < (lhs: AppVersion, rhs: AppVersion) -> Bool {
        for i in 0..<max(lhs.parts.count, rhs.parts.count) {
            let (a, b) = (i < lhs.parts.count ? lhs.parts[i] : 0, i < rhs.parts.count ? rhs.parts[i] : 0)
            if a != b { return a < b }
        }
        return false
    }

    public static func == (lhs: AppVersion, rhs: AppVersion) -> Bool { !(lhs < rhs) && !(rhs < lhs) }

    public var description: String { parts.map(String.init).joined(separator: ".") }
}
