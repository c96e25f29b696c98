import Crypto
import Foundation
import IsletRuntime

/// The start-up check that the CA bundle the dispatcher trusts verifies APNs's servers (issue 61
/// item 5). In 2025 APNs moved its server certificates to the SHA-2 root "USERTrust RSA
/// Certification Authority"; a host (or container image) with an older CA bundle fails every
/// connection to APNs with a TLS error, push after push. Checked once, at start-up, with a message
/// that names the fix, instead.
///
/// Only for Apple's hosts (`*.push.apple.com`): an endpoint elsewhere (the simulator, with its own
/// test CA in `ISLET_APNS_CA_FILE`) is not checked. Only on Linux, where swift-nio-ssl trusts the
/// system's bundle file and its hashed directory (`/etc/ssl/certs/<subject hash>.0`); elsewhere
/// (macOS's keychain) nothing is checked.
public enum APNsTrustCheck {
    /// SHA-256 of the DER certificate of "USERTrust RSA Certification Authority" (The USERTRUST
    /// Network), the root APNs's server certificates chain to since 2025.
    public static let rootSHA256 = "e793c9b02fd8aa13e21c31228accb08119643b749c898964b1746d46c3d4cbd2"
    public static let rootName = "USERTrust RSA Certification Authority"

    /// Where the system's CA bundle is looked for (as swift-nio-ssl looks on Linux).
    public static let systemBundles = ["/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"]
    /// The root in the system's hashed certificate directory (its OpenSSL subject hash), which
    /// swift-nio-ssl also trusts.
    public static let systemDirectoryEntry = "/etc/ssl/certs/fc5a8f99.0"

    /// Throws a ``ConfigurationError`` naming the fix when the dispatcher would talk to Apple and
    /// the bundle it trusts (`ISLET_APNS_CA_FILE`'s, else the system's) lacks APNs's root.
    /// - Parameter readFile: the contents of a file, `nil` when it cannot be read (tests give their own).
    public static func check(
        _ configuration: APNsClient.Configuration, readFile: (String) -> String? = { try? String(contentsOfFile: $0, encoding: .utf8) }
    ) throws(ConfigurationError) {
        #if os(Linux)
        try checkOnLinux(configuration, readFile: readFile)
        #endif
    }

    static func checkOnLinux(_ configuration: APNsClient.Configuration, readFile: (String) -> String?) throws(ConfigurationError) {
        let endpoints = [
            configuration.production, configuration.sandbox, configuration.broadcastProduction, configuration.broadcastSandbox,
            configuration.channelsProduction, configuration.channelsSandbox,
        ]
        guard endpoints.contains(where: { $0.host == "push.apple.com" || $0.host.hasSuffix(".push.apple.com") }) else { return }
        if let pem = configuration.trustedCertificatesPEM {
            guard contains(pem) else {
                throw ConfigurationError(
                    key: "islet.apns.ca.file",
                    problem:
                        "the CA bundle it names does not contain APNs's root (\(rootName), SHA-2, since 2025): every connection to APNs would fail its TLS check. Add that root to the file, or leave ISLET_APNS_CA_FILE unset to use the system's CA bundle")
            }
            return
        }
        // The hashed directory's entry for the root, when it is there.
        if let pem = readFile(systemDirectoryEntry), contains(pem) { return }
        guard let path = systemBundles.first(where: { readFile($0) != nil }), let pem = readFile(path) else {
            throw ConfigurationError(
                key: "islet.apns.ca.file",
                problem:
                    "no system CA bundle was found (\(systemBundles.joined(separator: ", "))): connections to APNs cannot be verified. Install the ca-certificates package, or set ISLET_APNS_CA_FILE to a PEM bundle that contains \(rootName)")
        }
        guard contains(pem) else {
            throw ConfigurationError(
                key: "islet.apns.ca.file",
                problem:
                    "the system CA bundle \(path) does not contain APNs's root (\(rootName), SHA-2, since 2025): every connection to APNs would fail its TLS check. Update the ca-certificates package (Debian/Ubuntu: apt-get install --only-upgrade ca-certificates; rebuild the image), or set ISLET_APNS_CA_FILE to a PEM bundle that contains it")
        }
    }

    /// Whether the PEM bundle holds a certificate whose DER has the root's SHA-256.
    public static func contains(_ pem: String) -> Bool {
        var inside = false
        var base64 = ""
        for line in pem.split(whereSeparator: \.isNewline) {
            let text = line.trimmingCharacters(in: .whitespaces)
            if text == "-----BEGIN CERTIFICATE-----" {
                inside = true
                base64 = ""
            } else if text == "-----END CERTIFICATE-----" {
                inside = false
                if let der = Data(base64Encoded: base64), SHA256.hash(data: der).map({ String(format: "%02x", $0) }).joined() == rootSHA256 { return true }
            } else if inside {
                base64 += text
            }
        }
        return false
    }
}
