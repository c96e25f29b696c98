import Foundation
import IsletMessages

/// The rules for what the app may send, in one place. Each check throws an ``APIError`` naming
/// the field and the rule.
public enum Validation {
    /// ActivityKit tokens are not a fixed size (today's are 80 bytes or more; device tokens were
    /// 32): accept 16 to 256 bytes, as hex.
    public static let tokenBytes = 16...256

    /// Identifiers (activity, device, user): 1 to `maxLength` characters of letters, digits and
    /// `. _ ~ -` — URL-safe, and never a `:`, which separates the parts of push-to-start keys.
    public static func isIdentifier(_ text: String, maxLength: Int) -> Bool {
        let bytes = text.utf8
        return !bytes.isEmpty && bytes.count <= maxLength && bytes.allSatisfy { isAlphanumeric($0) || "._~-".utf8.contains($0) }
    }

    static func identifier(_ text: String, field: String, maxLength: Int = 128) throws(APIError) -> String {
        guard isIdentifier(text, maxLength: maxLength) else {
            throw .invalid(field, "must be 1-\(maxLength) characters of letters, digits and . _ ~ -")
        }
        return text
    }

    /// A push token as lowercase hex: even length, 16-256 bytes, hex digits only (either case).
    static func token(_ text: String, field: String = "token") throws(APIError) -> String {
        let count = text.utf8.count
        guard count > 0 else { throw .invalid(field, "must not be empty") }
        guard count <= tokenBytes.upperBound * 2 else {
            throw .invalid(field, "must be at most \(tokenBytes.upperBound) bytes (\(tokenBytes.upperBound * 2) hex digits), got \(count) characters")
        }
        guard text.utf8.allSatisfy(isHexDigit) else { throw .invalid(field, "must contain only hex digits 0-9 a-f") }
        guard count.isMultiple(of: 2) else { throw .invalid(field, "must have an even number of hex digits, got \(count)") }
        guard count >= tokenBytes.lowerBound * 2 else {
            throw .invalid(field, "must be at least \(tokenBytes.lowerBound) bytes (\(tokenBytes.lowerBound * 2) hex digits), got \(count)")
        }
        return text.lowercased()
    }

    /// A bundle id: two or more dot-separated parts of letters, digits and `-`, at most 155 characters.
    static func bundleId(_ text: String, field: String = "app.bundleId") throws(APIError) -> String {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard text.utf8.count <= 155, parts.count >= 2,
            parts.allSatisfy({ !$0.isEmpty && $0.utf8.allSatisfy { isAlphanumeric($0) || $0 == UInt8(ascii: "-") } })
        else {
            throw .invalid(field, "must be a bundle identifier like com.example.app (at most 155 characters)")
        }
        return text
    }

    /// The Swift type name of an `ActivityAttributes`: an identifier of at most 100 characters.
    static func attributesType(_ text: String, field: String = "attributesType") throws(APIError) -> String {
        let bytes = Array(text.utf8)
        guard let first = bytes.first, bytes.count <= 100, isLetter(first) || first == UInt8(ascii: "_"),
            bytes.allSatisfy({ isAlphanumeric($0) || $0 == UInt8(ascii: "_") })
        else {
            throw .invalid(field, "must be a Swift type name (letters, digits, _; at most 100 characters)")
        }
        return text
    }

    /// `CFBundleShortVersionString`: one to four dot-separated numbers.
    static func appVersion(_ text: String, field: String = "appVersion") throws(APIError) -> String {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard (1...4).contains(parts.count), parts.allSatisfy({ (1...9).contains($0.count) && $0.utf8.allSatisfy(isDigit) }) else {
            throw .invalid(field, "must be a version like 5.2 or 5.2.1 (one to four numbers)")
        }
        return text
    }

    /// A language tag (BCP 47, or Apple's spelling with `_`), made canonical (``LanguageTag``).
    static func locale(_ text: String?, field: String = "locale") throws(APIError) -> String? {
        guard let text else { return nil }
        guard let tag = LanguageTag(text) else {
            throw .invalid(field, "must be a language tag like zh-Hans-CN or en (BCP 47; at most \(LanguageTag.maximumLength) characters)")
        }
        return tag.description
    }

    static func environment(_ value: APNsEnvironment, field: String = "app.environment") throws(APIError) -> APNsEnvironment {
        guard value.isKnown else { throw .invalid(field, "must be production or sandbox, got \"\(value.rawValue.prefix(40))\"") }
        return value
    }

    /// When the activity started: not in the future (beyond a few minutes of clock skew), and not
    /// more than 12 hours ago (iOS removes an activity by then).
    static func activityStart(_ date: Date?, now: Date, field: String = "activityStartedAt") throws(APIError) -> Date? {
        guard let date else { return nil }
        guard date <= now.addingTimeInterval(300) else { throw .invalid(field, "must not be in the future") }
        guard date >= now.addingTimeInterval(-12 * 3_600) else {
            throw .invalid(field, "is more than 12 hours ago: iOS has removed the activity")
        }
        return date
    }

    /// The reasons an app may give for invalidating a token.
    static let clientReasons: [InvalidationReason] = [.clientEnded, .userDismissed, .ineligible]

    package static func clientReason(_ reason: InvalidationReason, field: String = "reason") throws(APIError) -> InvalidationReason {
        guard clientReasons.contains(reason) else {
            throw .invalid(field, "must be one of \(clientReasons.map(\.rawValue).joined(separator: ", "))")
        }
        return reason
    }

    // MARK: Whole bodies

    /// A `PUT …/token` body as the registry keeps it: every field checked, in the order of the
    /// body's fields, the token lowercased. The first broken rule throws.
    package static func activityToken(_ request: RegisterActivityTokenRequest, now: Date) throws(APIError) -> RegisterActivityTokenRequest {
        var checked = request
        checked.token = try token(request.token)
        checked.attributesType = try attributesType(request.attributesType)
        checked.app = AppTarget(bundleId: try bundleId(request.app.bundleId), environment: try environment(request.app.environment))
        checked.appVersion = try appVersion(request.appVersion)
        checked.activityStartedAt = try activityStart(request.activityStartedAt, now: now)
        checked.deviceId = try request.deviceId.map { id throws(APIError) in try identifier(id, field: "deviceId") }
        checked.locale = try locale(request.locale)
        return checked
    }

    /// A push-to-start registration body as the registry keeps it: every field checked, the token lowercased.
    package static func pushToStartToken(_ request: RegisterPushToStartTokenRequest) throws(APIError) -> RegisterPushToStartTokenRequest {
        var checked = request
        checked.token = try token(request.token)
        checked.environment = try environment(request.environment, field: "environment")
        checked.appVersion = try appVersion(request.appVersion)
        checked.locale = try locale(request.locale)
        return checked
    }

    /// A widget kind in a path: ``MessageKey/requireWidgetKind(_:field:)``, the rule templates follow too.
    static func widgetKind(_ text: String, field: String = "kind") throws(APIError) -> String {
        do throws(MessageValidationError) { try MessageKey.requireWidgetKind(text, field: field) } catch { throw .invalid(field, error.problem) }
        return text
    }

    package static func widgetToken(_ request: RegisterWidgetTokenRequest) throws(APIError) -> RegisterWidgetTokenRequest {
        var checked = request
        checked.token = try token(request.token)
        checked.environment = try environment(request.environment, field: "environment")
        checked.appVersion = try appVersion(request.appVersion)
        return checked
    }

    private static func isDigit(_ byte: UInt8) -> Bool { (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) }
    private static func isLetter(_ byte: UInt8) -> Bool {
        (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
    }
    private static func isAlphanumeric(_ byte: UInt8) -> Bool { isDigit(byte) || isLetter(byte) }
    private static func isHexDigit(_ byte: UInt8) -> Bool {
        isDigit(byte) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "F")).contains(byte)
    }
}
