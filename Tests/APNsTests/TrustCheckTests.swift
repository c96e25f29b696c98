import Foundation
import IsletRuntime
import Testing
@testable import APNsDispatcher

/// Issue 61 item 5: APNs's servers chain to the SHA-2 "USERTrust RSA Certification Authority" root
/// since 2025; a CA bundle without it fails every connection. The dispatcher refuses to start with
/// such a bundle, and says how to fix it.
#if os(Linux)
@Suite("The start-up check of the CA bundle against APNs's root (Linux: the system bundle and hashed directory swift-nio-ssl trusts)")
struct TrustCheckTests {
    /// The root as a PEM block, read from this machine's bundle (Debian's ca-certificates has it).
    static func root() throws -> String {
        try String(contentsOfFile: "/etc/ssl/certs/USERTrust_RSA_Certification_Authority.pem", encoding: .utf8)
    }
    static func other() throws -> String {
        try String(contentsOfFile: "/etc/ssl/certs/USERTrust_ECC_Certification_Authority.pem", encoding: .utf8)
    }

    @Test("a bundle with the root passes, wherever it is in the bundle; one without it is refused, naming the root and the fix")
    func systemBundle() throws {
        let apple = APNsClient.Configuration()
        let (root, other) = (try Self.root(), try Self.other())
        #expect(APNsTrustCheck.contains(other + root) && !APNsTrustCheck.contains(other))
        #expect(throws: Never.self) { try APNsTrustCheck.check(apple) { $0 == APNsTrustCheck.systemBundles[0] ? other + "\n" + root : nil } }
        #expect(throws: Never.self) { try APNsTrustCheck.check(apple) { $0 == APNsTrustCheck.systemBundles[1] ? root : nil } }
        // The hashed directory's entry is trusted too, whatever the bundle file holds.
        #expect(throws: Never.self) { try APNsTrustCheck.check(apple) { $0 == APNsTrustCheck.systemDirectoryEntry ? root : other } }
        let refused = #expect(throws: ConfigurationError.self) { try APNsTrustCheck.check(apple) { _ in other } }
        #expect(refused?.problem.contains("USERTrust RSA Certification Authority") == true && refused?.problem.contains("ca-certificates") == true)
        let missing = #expect(throws: ConfigurationError.self) { try APNsTrustCheck.check(apple) { _ in nil } }
        #expect(missing?.problem.contains("no system CA bundle") == true)
        // This machine's own bundle, as the service reads it.
        #expect(throws: Never.self) { try APNsTrustCheck.check(apple) }
    }

    @Test("ISLET_APNS_CA_FILE for Apple's hosts must hold the root too; for another host (the simulator and its test CA) nothing is checked")
    func ownBundle() throws {
        var apple = APNsClient.Configuration()
        apple.trustedCertificatesPEM = try Self.other()
        #expect(throws: ConfigurationError.self) { try APNsTrustCheck.check(apple) { _ in nil } }
        apple.trustedCertificatesPEM = try Self.root()
        #expect(throws: Never.self) { try APNsTrustCheck.check(apple) { _ in nil } }
        var simulator = APNsClient.Configuration(trustedCertificatesPEM: try Self.other())
        simulator.useEverywhere(APNsClient.Endpoint(host: "127.0.0.1", port: 2197))
        #expect(throws: Never.self) { try APNsTrustCheck.check(simulator) { _ in nil } }
    }
}
#endif
