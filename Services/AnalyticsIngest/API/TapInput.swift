import Foundation
import IsletMessages

/// One tap as the app sends it: the URL the app was opened with, when the user tapped (the
/// device's clock, ISO 8601), and the app's and the system's versions.
///
/// ```json
/// {"url": "fooddelivery://order/42?isl_a=order-42&…&isl_sig=…", "tappedAt": "2026-11-22T10:15:30.123Z",
///  "appVersion": "5.2.0", "osVersion": "18.1"}
/// ```
///
/// Every field is optional in decoding so that a batch with one incomplete tap still gets a
/// verdict per tap: a missing field rejects that tap (`invalidParameter`, naming the field), not
/// the whole request. A field of the wrong JSON type makes the request `malformedBody`.
public struct TapInput: Codable, Sendable, Equatable {
    public var url: String?
    public var tappedAt: String?
    public var appVersion: String?
    public var osVersion: String?

    public init(url: String?, tappedAt: String?, appVersion: String?, osVersion: String?) {
        self.url = url
        self.tappedAt = tappedAt
        self.appVersion = appVersion
        self.osVersion = osVersion
    }
}

extension TapInput: IsletJSONReadable {
    public init?(json: JSONValue) {
        guard let members = JSONMembers(json), let url = members.optional("url", members.string), let tappedAt = members.optional("tappedAt", members.string),
            let appVersion = members.optional("appVersion", members.string), let osVersion = members.optional("osVersion", members.string)
        else { return nil }
        self.init(url: url, tappedAt: tappedAt, appVersion: appVersion, osVersion: osVersion)
    }
}
