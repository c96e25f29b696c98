import APNsSimulator
import Crypto
import Foundation
import IsletRuntime
import SwiftASN1
import Testing
import X509

@Suite("The APNs simulator's settings")
struct SimulatorSettingsTests {
    /// A .p8-like private key file for ISLET_SIMULATOR_KEYS.
    private func keyFile() throws -> String {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("islet-sim-\(UUID().uuidString).p8").path
        try P256.Signing.PrivateKey().pemRepresentation.write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func generatedCertificateNamesTheConfiguredHosts() throws {
        let path = try keyFile()
        defer { try? FileManager.default.removeItem(atPath: path) }
        // In compose the dispatcher reaches the simulator by its service name: the certificate must name it.
        let settings = try SimulatorSettings(from: .variables([
            "ISLET_SIMULATOR_KEYS": "KEY1234567=TEAM123456:\(path)", "ISLET_SIMULATOR_TLS_HOSTS": "apns-simulator, 10.1.2.3",
        ]))
        #expect(settings.tlsHosts == ["apns-simulator", "10.1.2.3"])
        let names = try #require(try Certificate(pemEncoded: settings.tls.certificatePEM).extensions.subjectAlternativeNames)
        #expect(names.contains(.dnsName("apns-simulator")))
        #expect(names.contains(.ipAddress(ASN1OctetString(contentBytes: [10, 1, 2, 3]))))
        #expect(!names.contains(.dnsName("localhost")))

        let defaults = try SimulatorSettings(from: .variables(["ISLET_SIMULATOR_KEYS": "KEY1234567=TEAM123456:\(path)"]))
        #expect(defaults.tlsHosts == ["localhost", "127.0.0.1"])
        let defaultNames = try #require(try Certificate(pemEncoded: defaults.tls.certificatePEM).extensions.subjectAlternativeNames)
        #expect(defaultNames.contains(.dnsName("localhost")))
        #expect(defaultNames.contains(.ipAddress(ASN1OctetString(contentBytes: [127, 0, 0, 1]))))

        #expect(throws: ConfigurationError.self) {
            try SimulatorSettings(from: .variables(["ISLET_SIMULATOR_KEYS": "KEY1234567=TEAM123456:\(path)", "ISLET_SIMULATOR_TLS_HOSTS": " , "]))
        }
    }
}
