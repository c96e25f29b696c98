/// Why a tap was not counted.
public struct ClickRejectionReason: OpenEnum {
    public let rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }

    /// The signature does not match the parameters: forged or edited.
    public static let badSignature = ClickRejectionReason(rawValue: "badSignature")
    /// Signed with a key id analytics-ingest does not have (retired, or never ours).
    public static let unknownKeyId = ClickRejectionReason(rawValue: "unknownKeyId")
    /// The link's validity ended before the tap.
    public static let expired = ClickRejectionReason(rawValue: "expired")
    /// Not a URL, or not one of Islet's.
    public static let malformedUrl = ClickRejectionReason(rawValue: "malformedUrl")
    /// A required analytics parameter is absent.
    public static let missingParameter = ClickRejectionReason(rawValue: "missingParameter")
    /// An analytics parameter appears twice (an attempt to smuggle a second value past the signature).
    public static let duplicateParameter = ClickRejectionReason(rawValue: "duplicateParameter")
    /// A parameter has a value that cannot be read (not a number, unknown surface, …).
    public static let invalidParameter = ClickRejectionReason(rawValue: "invalidParameter")
    /// The same tap was already counted.
    public static let duplicateTap = ClickRejectionReason(rawValue: "duplicateTap")

    public static let knownValues: [ClickRejectionReason] = [
        .badSignature, .unknownKeyId, .expired, .malformedUrl, .missingParameter, .duplicateParameter, .invalidParameter,
        .duplicateTap,
    ]
}
