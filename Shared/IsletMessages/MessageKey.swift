/// Record keys, formed in one place.
///
/// Activity ids are chosen by backends, so two apps may use the same one (`order-42`): Islet keeps
/// an activity's state under its app and id together, ``activity(bundleId:activityId:)``. Records
/// are partitioned by the activity id alone (``partitionKeyRange(of:)``), so that everything about an
/// id lands in one partition of every co-partitioned topic however its key is spelled.
public enum MessageKey {
    /// An activity of one app: `<bundleId>/<activityId>`. Bundle ids never contain `/`, so the
    /// first `/` ends the app.
    public static func activity(bundleId: String, activityId: String) -> String { "\(bundleId)/\(activityId)" }

    /// The key a backend gives an activity's events: the activity id alone (the event names its app
    /// in its value).
    public static func activity(_ activityId: String) -> String { activityId }

    /// One device's update token of an activity: `<bundleId>/<activityId>/<deviceId>`. It lands in
    /// the activity's partition (``partitionKeyRange(of:)`` hashes the activity id alone).
    public static func device(bundleId: String, activityId: String, deviceId: String) -> String { "\(bundleId)/\(activityId)/\(deviceId)" }

    /// The activity (`<bundleId>/<activityId>`) and device of a device's key
    /// (``device(bundleId:activityId:deviceId:)``); `nil` for any other key.
    public static func splitDevice(_ key: String) -> (activityKey: String, deviceId: String)? {
        guard !isDeviceScopedKey(key), let first = key.firstIndex(of: "/") else { return nil }
        guard let second = key[key.index(after: first)...].firstIndex(of: "/") else { return nil }
        return (String(key[..<second]), String(key[key.index(after: second)...]))
    }

    /// The app and activity id of an activity's key (`<bundleId>/<activityId>`); `nil` for any other key.
    public static func splitActivity(_ key: String) -> (bundleId: String, activityId: String)? {
        guard !isDeviceScopedKey(key), let slash = key.firstIndex(of: "/") else { return nil }
        let activityId = key[key.index(after: slash)...]
        guard !activityId.isEmpty, !activityId.contains("/") else { return nil }
        return (String(key[..<slash]), String(activityId))
    }

    /// A device id as a device's key needs it: without `/` and `:`.
    public static func requireDeviceId(_ deviceId: String, field: String = "deviceId") throws(MessageValidationError) {
        for character in [":", "/"] where deviceId.contains(character) {
            throw MessageValidationError(field: field, problem: "must not contain '\(character)' (keys use it as a separator)")
        }
    }

    /// Where the bytes of `key` that choose its partition start (``partitionKeyRange(of:)``).
    public static func partitionKeyStart<Key: Collection<UInt8>>(of key: Key) -> Int {
        partitionKeyRange(of: key).lowerBound
    }

    /// The bytes of `key` that choose its partition: for an activity of an app
    /// (`<bundleId>/<activityId>`, or one device's `<bundleId>/<activityId>/<deviceId>`) the activity
    /// id between the first `/` and the next, so that it lands where a backend's event keyed by the
    /// bare activity id does; for every other key (an activity id, which never holds `/`; a
    /// push-to-start key, whose first `:` comes before any `/`) the whole key.
    public static func partitionKeyRange<Key: Collection<UInt8>>(of key: Key) -> Range<Int> {
        var offset = 0
        var start: Int?
        for byte in key {
            if start == nil, byte == UInt8(ascii: ":") { return 0..<key.count }
            if byte == UInt8(ascii: "/") {
                if let start { return start..<offset }
                start = offset + 1
            }
            offset += 1
        }
        return (start ?? 0)..<offset
    }

    /// An activity id as keys need it: neither `:` (push-to-start keys) nor `/` (an app's activity).
    public static func requireActivityId(_ activityId: String, field: String = "activityId") throws(MessageValidationError) {
        for character in [":", "/"] where activityId.contains(character) {
            throw MessageValidationError(field: field, problem: "must not contain '\(character)' (keys use it as a separator)")
        }
    }

    /// A bundle id: two or more dot-separated parts of ASCII letters, digits and `-`, at most 155 characters.
    public static func requireBundleId(_ bundleId: String, field: String = "app.bundleId") throws(MessageValidationError) {
        let parts = bundleId.utf8.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        let valid = bundleId.utf8.count <= 155 && parts.count >= 2
            && parts.allSatisfy { part in
                !part.isEmpty && part.allSatisfy { byte in
                    (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                        || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: "-")
                }
            }
        guard valid else {
            throw MessageValidationError(field: field, problem: "must be a bundle identifier like com.example.app (at most 155 characters)")
        }
    }

    /// Whether `key` is a push-to-start or a widget key (``pushToStart(bundleId:deviceId:attributesType:)``,
    /// ``widget(bundleId:deviceId:kind:)``): a device's, not an activity's.
    public static func isDeviceScopedKey(_ key: String) -> Bool { key.hasPrefix("pts:") || key.hasPrefix("wgt:") }

    /// Widget pushes of one app, device and widget kind (iOS 26, `apns-push-type: widgets`):
    /// `wgt:<bundleId>:<deviceId>:<kind>`. Like a push-to-start key, it is partitioned whole.
    public static func widget(bundleId: String, deviceId: String, kind: String) -> String {
        "wgt:\(bundleId):\(deviceId):\(kind)"
    }

    /// The app, device and kind of a widget key (``widget(bundleId:deviceId:kind:)``); `nil` for any other key.
    public static func splitWidget(_ key: String) -> (bundleId: String, deviceId: String, kind: String)? {
        splitDeviceKey(key, prefix: "wgt:").map { (bundleId: $0.0, deviceId: $0.1, kind: $0.2) }
    }

    /// The three parts of `<prefix><bundleId>:<deviceId>:<last>` (bundle ids, attributes types and
    /// widget kinds hold no `:`; a device id neither).
    static func splitDeviceKey(_ key: String, prefix: String) -> (String, String, String)? {
        guard key.hasPrefix(prefix) else { return nil }
        let parts = key.dropFirst(prefix.count).split(separator: ":", omittingEmptySubsequences: false)
        guard parts.count == 3, !parts.contains(where: \.isEmpty) else { return nil }
        return (String(parts[0]), String(parts[1]), String(parts[2]))
    }

    /// A widget kind (`WidgetInfo.kind`, the widget configuration's `kind`) as token-registry takes
    /// it in its path and a key needs it: 1-128 letters, digits and `. _ ~ -` (no `:` or `/`). The
    /// one rule: a template cannot name a kind an app could not register.
    public static func requireWidgetKind(_ kind: String, field: String = "kind") throws(MessageValidationError) {
        let allowed = kind.utf8.allSatisfy { byte in
            (UInt8(ascii: "a")...UInt8(ascii: "z")).contains(byte) || (UInt8(ascii: "A")...UInt8(ascii: "Z")).contains(byte)
                || (UInt8(ascii: "0")...UInt8(ascii: "9")).contains(byte) || byte == UInt8(ascii: ".") || byte == UInt8(ascii: "_")
                || byte == UInt8(ascii: "~") || byte == UInt8(ascii: "-")
        }
        guard (1...128).contains(kind.utf8.count), allowed else {
            throw MessageValidationError(field: field, problem: "must be a widget kind of 1-128 letters, digits and . _ ~ -")
        }
    }

    /// Push-to-start traffic of one app, device and attributes type: `pts:<bundleId>:<deviceId>:<attributesType>`.
    /// Activity ids never contain `:`, so the two kinds of key never collide.
    public static func pushToStart(bundleId: String, deviceId: String, attributesType: String) -> String {
        "pts:\(bundleId):\(deviceId):\(attributesType)"
    }
}
