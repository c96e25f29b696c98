import Configuration
import Foundation

/// Reads a service's configuration by dotted key (`islet.kafka.bootstrap`) from the environment
/// (`ISLET_KAFKA_BOOTSTRAP`), validating as it goes: a bad or missing value is an error that
/// names the environment variable, so a misconfigured service fails at start-up, not later.
public struct IsletConfig: Sendable {
    private let reader: ConfigReader

    public init(reader: ConfigReader) {
        self.reader = reader
    }

    /// The process environment.
    public static func environment() -> IsletConfig {
        IsletConfig(reader: ConfigReader(provider: EnvironmentVariablesProvider()))
    }

    /// Given variables (tests), by their environment names: `["ISLET_HTTP_PORT": "8080"]`.
    public static func variables(_ variables: [String: String]) -> IsletConfig {
        IsletConfig(reader: ConfigReader(provider: EnvironmentVariablesProvider(environmentVariables: variables)))
    }

    /// `islet.kafka.bootstrap` → `ISLET_KAFKA_BOOTSTRAP`.
    public static func variableName(for key: String) -> String {
        key.split(separator: ".").joined(separator: "_").replacingOccurrences(of: "-", with: "_").uppercased()
    }

    /// A string, or the default; an empty value counts as absent.
    public func string(_ key: String, default defaultValue: String? = nil, isSecret: Bool = false) throws(ConfigurationError) -> String {
        if let value = reader.string(forKey: ConfigKey(key), isSecret: isSecret), !value.isEmpty { return value }
        if let defaultValue { return defaultValue }
        throw ConfigurationError(key: key, problem: "is required")
    }

    /// A string, or `nil` when absent or empty.
    public func optionalString(_ key: String, isSecret: Bool = false) -> String? {
        guard let value = reader.string(forKey: ConfigKey(key), isSecret: isSecret), !value.isEmpty else { return nil }
        return value
    }

    public func int(_ key: String, default defaultValue: Int? = nil, range: ClosedRange<Int>? = nil) throws(ConfigurationError) -> Int {
        guard let text = optionalString(key) else {
            if let defaultValue { return defaultValue }
            throw ConfigurationError(key: key, problem: "is required")
        }
        guard let value = Int(text.trimmingCharacters(in: .whitespaces)) else {
            throw ConfigurationError(key: key, problem: "must be an integer, got \"\(text)\"")
        }
        if let range, !range.contains(value) {
            throw ConfigurationError(key: key, problem: "must be in \(range.lowerBound)...\(range.upperBound), got \(value)")
        }
        return value
    }

    public func bool(_ key: String, default defaultValue: Bool) throws(ConfigurationError) -> Bool {
        guard let text = optionalString(key) else { return defaultValue }
        switch text.lowercased() {
        case "1", "true", "yes", "on": return true
        case "0", "false", "no", "off": return false
        default: throw ConfigurationError(key: key, problem: "must be true or false, got \"\(text)\"")
        }
    }

    /// A duration given in milliseconds.
    public func milliseconds(_ key: String, default defaultValue: Duration) throws(ConfigurationError) -> Duration {
        guard optionalString(key) != nil else { return defaultValue }
        return .milliseconds(try int(key, range: 0...Int(Int32.max)))
    }

    /// One of a fixed set of words.
    public func choice<T: RawRepresentable<String>>(_ key: String, default defaultValue: T, allowed: [T]) throws(ConfigurationError) -> T {
        guard let text = optionalString(key) else { return defaultValue }
        guard let value = T(rawValue: text.lowercased()), allowed.contains(where: { $0.rawValue == value.rawValue }) else {
            throw ConfigurationError(key: key, problem: "must be one of \(allowed.map(\.rawValue).joined(separator: ", ")), got \"\(text)\"")
        }
        return value
    }

    /// `name=value` pairs separated by commas (librdkafka properties keep their dotted names):
    /// `ISLET_KAFKA_CONSUMER_PROPERTIES="fetch.wait.max.ms=5,session.timeout.ms=6000"`.
    public func properties(_ key: String) throws(ConfigurationError) -> [String: String] {
        guard let text = optionalString(key) else { return [:] }
        var properties: [String: String] = [:]
        for (index, pair) in text.split(separator: ",").enumerated() {
            let parts = pair.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard parts.count == 2, !parts[0].isEmpty else {
                // The item itself is not shown: these lists hold secrets (keys of JWTs and links).
                throw ConfigurationError(
                    key: key, problem: "expects name=value pairs separated by commas; item \(index + 1) is not one (its text is not shown)")
            }
            // A name given twice would silently drop one of them (a signing key, a peer).
            guard properties.updateValue(parts[1], forKey: parts[0]) == nil else {
                throw ConfigurationError(key: key, problem: "names \(parts[0]) twice (item \(index + 1))")
            }
        }
        return properties
    }

    /// The `name=value` pairs of `key` (``properties(_:)``), made into a value by `make`; its
    /// error's description becomes the configuration error (it must not quote secrets).
    public func properties<Value>(_ key: String, as make: ([String: String]) throws -> Value) throws(ConfigurationError) -> Value {
        let properties = try properties(key)
        do {
            return try make(properties)
        } catch {
            throw ConfigurationError(key: key, problem: "\(error)")
        }
    }
}
