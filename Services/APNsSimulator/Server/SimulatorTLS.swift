import Crypto
import Foundation
import IsletMessages
import NIOSSL
import SwiftASN1
import X509

/// The simulator's TLS identity: a certificate and key read from files, or a self-signed one made
/// at start-up (for `localhost` and `127.0.0.1`). Clients trust it through ``certificatePEM``.
public struct SimulatorTLS: Sendable {
    public let certificatePEM: String
    public let privateKeyPEM: String

    public init(certificatePEM: String, privateKeyPEM: String) {
        self.certificatePEM = certificatePEM
        self.privateKeyPEM = privateKeyPEM
    }

    /// Reads a PEM certificate (chain) and its private key.
    public static func files(certificate: String, privateKey: String) throws -> SimulatorTLS {
        SimulatorTLS(certificatePEM: try String(contentsOfFile: certificate, encoding: .utf8), privateKeyPEM: try String(contentsOfFile: privateKey, encoding: .utf8))
    }

    /// A new self-signed P-256 certificate for `hosts` (DNS names or IPv4 addresses), valid for a
    /// year from the clock's now (an hour before, for clocks a little behind).
    public static func selfSigned(hosts: [String] = ["localhost", "127.0.0.1"], clock: any WallClock = SystemWallClock()) throws -> SimulatorTLS {
        let key = P256.Signing.PrivateKey()
        let name = try DistinguishedName {
            CommonName("Islet APNs simulator")
            OrganizationName("Islet")
        }
        let now = clock.date
        let names: [GeneralName] = hosts.map { host in
            let octets = host.split(separator: ".").compactMap { UInt8($0) }
            if octets.count == 4 { return .ipAddress(ASN1OctetString(contentBytes: ArraySlice(octets))) }
            return .dnsName(host)
        }
        let certificate = try Certificate(
            version: .v3, serialNumber: Certificate.SerialNumber(), publicKey: .init(key.publicKey),
            notValidBefore: now.addingTimeInterval(-3_600), notValidAfter: now.addingTimeInterval(365 * 86_400), issuer: name, subject: name,
            signatureAlgorithm: .ecdsaWithSHA256,
            extensions: try Certificate.Extensions {
                Critical(BasicConstraints.isCertificateAuthority(maxPathLength: 0))
                Critical(KeyUsage(digitalSignature: true, keyCertSign: true))
                SubjectAlternativeNames(names)
            },
            issuerPrivateKey: .init(key))
        return SimulatorTLS(certificatePEM: try certificate.serializeAsPEM().pemString, privateKeyPEM: key.pemRepresentation)
    }

    /// A TLS server configuration with this certificate, offering HTTP/2 (ALPN `h2`).
    public func serverConfiguration() throws -> TLSConfiguration {
        var configuration = TLSConfiguration.makeServerConfiguration(
            certificateChain: try NIOSSLCertificate.fromPEMBytes(Array(certificatePEM.utf8)).map { .certificate($0) },
            privateKey: .privateKey(try NIOSSLPrivateKey(bytes: Array(privateKeyPEM.utf8), format: .pem)))
        configuration.applicationProtocols = ["h2"]
        configuration.minimumTLSVersion = .tlsv12
        return configuration
    }
}
