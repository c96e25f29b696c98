/// librdkafka's connection-security properties, which every Islet process takes from its
import Foundation
/// environment under librdkafka's own names: `ISLET_KAFKA_` and the name in capitals with `_` for
/// `.` (`security.protocol` → `ISLET_KAFKA_SECURITY_PROTOCOL`, `sasl.password` →
/// `ISLET_KAFKA_SASL_PASSWORD`). They apply to every client of the process: producers, group
/// consumers, replica readers and admin clients.
public enum KafkaSecurity {
    /// The properties read (librdkafka's CONFIGURATION.md: security, SSL, SASL).
    public static let propertyNames = [
        "security.protocol",
        "ssl.ca.location", "ssl.ca.pem", "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem",
        "ssl.key.password", "ssl.endpoint.identification.algorithm", "ssl.cipher.suites", "ssl.crl.location",
        "sasl.mechanisms", "sasl.username", "sasl.password",
        "sasl.kerberos.service.name", "sasl.kerberos.principal", "sasl.kerberos.keytab",
        "sasl.oauthbearer.method", "sasl.oauthbearer.client.id", "sasl.oauthbearer.client.secret", "sasl.oauthbearer.token.endpoint.url",
        "sasl.oauthbearer.scope",
    ]

    /// The environment variable of a property.
    public static func variable(for property: String) -> String {
        "ISLET_KAFKA_" + property.replacingOccurrences(of: ".", with: "_").uppercased()
    }

    /// The properties set (not empty) in `environment`.
    public static func properties(from environment: [String: String]) -> [String: String] {
        var properties: [String: String] = [:]
        for name in propertyNames {
            if let value = environment[variable(for: name)], !value.isEmpty { properties[name] = value }
        }
        return properties
    }
}
