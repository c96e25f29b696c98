import Crypto
import Foundation
import IsletMessages
import IsletRuntime

/// The simulator's settings from the environment (docs/apns-simulator.md lists them).
public struct SimulatorSettings: Sendable {
    public var host: String
    public var port: Int
    public var adminHost: String
    public var adminPort: Int
    public var keys: [ProviderTokenVerifier.Key]
    /// `ISLET_SIMULATOR_ENVIRONMENT` (`production` or `sandbox`; unset: either): the environment the
    /// simulator plays for keys limited to one.
    public var environment: APNsEnvironment?
    public var tls: SimulatorTLS
    /// Where to write the certificate clients must trust (when it was generated).
    public var certificateOut: String?
    /// The names a generated certificate is valid for (`ISLET_SIMULATOR_TLS_HOSTS`): DNS names or
    /// IPv4 addresses. In a container network the dispatcher reaches the simulator by its service
    /// name, which must be among them for the TLS handshake to verify.
    public var tlsHosts: [String]
    public var maxConcurrentStreams: Int
    public var recordCapacity: Int
    public var faults: [Fault]

    public init(from config: IsletConfig) throws {
        host = try config.string("islet.simulator.host", default: "127.0.0.1")
        port = try config.int("islet.simulator.port", default: 2_197, range: 0...65_535)
        adminHost = try config.string("islet.http.host", default: "127.0.0.1")
        adminPort = try config.int("islet.http.port", default: 8_090, range: 0...65_535)
        keys = []
        for (keyID, value) in try config.properties("islet.simulator.keys").sorted(by: { $0.key < $1.key }) {
            // KEYID=TEAMID:/path[:ENVIRONMENT[:TOPICS]]: a scoped key's limits, as the dispatcher's ISLET_APNS_SCOPED_KEYS.
            let parts = value.split(separator: ":", omittingEmptySubsequences: false).map(String.init)
            guard (2...4).contains(parts.count), let pem = try? String(contentsOfFile: parts[1], encoding: .utf8) else {
                throw ConfigurationError(
                    key: "islet.simulator.keys", problem: "expects KEYID=TEAMID:/path/to/key.p8-or-public.pem[:ENVIRONMENT[:TOPICS]], got \(keyID)=\(value)")
            }
            let environment: APNsEnvironment? = parts.count > 2 && parts[2] != "*" ? APNsEnvironment(rawValue: parts[2]) : nil
            if let environment, !environment.isKnown {
                throw ConfigurationError(key: "islet.simulator.keys", problem: "key \(keyID): the environment is production, sandbox or *, got \(parts[2])")
            }
            let topics: Set<String>? = parts.count > 3 && parts[3] != "*" ? Set(parts[3].split(separator: "+").map(String.init)) : nil
            let publicKey: P256.Signing.PublicKey
            if let privateKey = try? P256.Signing.PrivateKey(pemRepresentation: pem) {
                publicKey = privateKey.publicKey
            } else if let key = try? P256.Signing.PublicKey(pemRepresentation: pem) {
                publicKey = key
            } else {
                throw ConfigurationError(key: "islet.simulator.keys", problem: "\(parts[1]) holds no P-256 key in PEM")
            }
            keys.append(.init(keyID: keyID, teamID: parts[0], publicKey: publicKey, environment: environment, topics: topics))
        }
        guard !keys.isEmpty else {
            throw ConfigurationError(key: "islet.simulator.keys", problem: "must name at least one signing key: KEYID=TEAMID:/path/to/key")
        }
        if let name = config.optionalString("islet.simulator.environment") {
            guard APNsEnvironment(rawValue: name).isKnown else {
                throw ConfigurationError(key: "islet.simulator.environment", problem: "is production or sandbox, got \(name)")
            }
            environment = APNsEnvironment(rawValue: name)
        }
        if let certificate = config.optionalString("islet.simulator.tls.certificate") {
            guard let key = config.optionalString("islet.simulator.tls.key") else {
                throw ConfigurationError(key: "islet.simulator.tls.key", problem: "is required with ISLET_SIMULATOR_TLS_CERTIFICATE")
            }
            tls = try SimulatorTLS.files(certificate: certificate, privateKey: key)
            certificateOut = nil
            tlsHosts = []
        } else {
            tlsHosts = (config.optionalString("islet.simulator.tls.hosts") ?? "localhost,127.0.0.1")
                .split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces) }.filter { !$0.isEmpty }
            guard !tlsHosts.isEmpty else {
                throw ConfigurationError(key: "islet.simulator.tls.hosts", problem: "must name at least one host")
            }
            tls = try SimulatorTLS.selfSigned(hosts: tlsHosts)
            certificateOut = config.optionalString("islet.simulator.tls.certificate.out")
        }
        maxConcurrentStreams = try config.int("islet.simulator.max.concurrent.streams", default: 1_000, range: 1...100_000)
        recordCapacity = try config.int("islet.simulator.record.capacity", default: 200_000, range: 1...10_000_000)
        if let text = config.optionalString("islet.simulator.faults") {
            guard let faults = try? JSONDecoder().decode([Fault].self, from: Data(text.utf8)) else {
                throw ConfigurationError(key: "islet.simulator.faults", problem: "must be a JSON array of faults")
            }
            self.faults = faults
        } else {
            faults = []
        }
    }
}
