import Foundation
import HTTPTypes
import IsletMessages
import IsletRuntime
import TokenRegistry

/// The properties the token-registry body fuzzer checks: the bodies of the app's HTTP API read as
/// the routes read them (``HTTPJSON/decodeBody(_:from:)``), then checked as the registry
/// checks them (``Validation``). The first byte picks the body (``check(_:)``), the rest is its bytes.
///
/// For every input there is a verdict without a trap, and it is either
/// - a clear refusal: 400 `malformedBody` for bytes that do not decode, 400 `invalidField` naming
///   the field for a body that breaks a rule; or
/// - a body the registry accepts, which encodes to JSON that decodes to the same value, and which
///   passes the checks again unchanged.
public enum RegistryChecks {
    /// The registry's clock (its times are whole milliseconds); the seeds' start times are near it.
    static let now = Date(timeIntervalSince1970: 1_795_000_000)

    /// Checks one input; traps when a property does not hold.
    public static func check(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let body = Array(bytes.dropFirst())
        switch first % 4 {
        case 0: check(RegisterActivityTokenRequest.self, body) { request throws(APIError) in try Validation.activityToken(request, now: now) }
        case 1: check(RegisterPushToStartTokenRequest.self, body) { request throws(APIError) in try Validation.pushToStartToken(request) }
        case 2: check(InvalidateRequest.self, body) { request throws(APIError) in InvalidateRequest(reason: try Validation.clientReason(request.reason)) }
        default: check(FrequentUpdatesRequest.self, body) { request throws(APIError) in request }
        }
    }

    static func check<Body: Codable & Equatable>(_ type: Body.Type, _ bytes: [UInt8], validated: (Body) throws(APIError) -> Body) {
        let decoded: Body
        do {
            decoded = try HTTPJSON.decodeBody(type, from: bytes)
        } catch {
            require(
                error.status == .badRequest && error.code == .malformedBody && !error.reason.isEmpty,
                "\(Body.self) \(quoted(bytes)) does not decode, and the answer is not a clear 400 malformedBody: \(error)")
            return
        }
        let valid: Body
        do {
            valid = try validated(decoded)
        } catch {
            require(
                error.status == .badRequest && error.code == .invalidField && error.field?.isEmpty == false && !error.reason.isEmpty,
                "\(Body.self) \(quoted(bytes)) is refused without naming the field and the rule: \(error)")
            return
        }
        let encoded = (try? IsletJSON.encode(valid)) ?? []
        require(
            (try? HTTPJSON.decodeBody(type, from: encoded)) == valid,
            "the accepted \(Body.self) \(quoted(bytes)) does not decode to itself from its JSON \(quoted(encoded))")
        require((try? validated(valid)) == valid, "the accepted \(Body.self) \(quoted(bytes)) changes when it is checked again")
    }
}
