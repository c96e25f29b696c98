import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import IsletTokens
import JWTKit
import Logging
import Synchronization
@testable import TokenRegistry

let quietLogger = testLogger("islet.test.registry", level: .critical)

/// A publisher that keeps what it was given, in order, and can be told to refuse (Kafka down).
final class RecordingPublisher: TokenRecordPublisher {
    private let state = Mutex<(records: [TokenRecord], tombstones: [String], refusing: Bool)>(([], [], false))

    var records: [TokenRecord] { state.withLock { $0.records } }
    var tombstones: [String] { state.withLock { $0.tombstones } }
    func refuse(_ refusing: Bool) { state.withLock { $0.refusing = refusing } }

    func publish(_ record: TokenRecord) async throws -> TokenTable.Position? {
        try state.withLock { state in
            if state.refusing { throw TestKafkaDown() }
            state.records.append(record)
            return TokenTable.Position(partition: 0, offset: Int64(state.records.count + state.tombstones.count - 1))
        }
    }

    func tombstone(key: String) async throws -> TokenTable.Position? {
        try state.withLock { state in
            if state.refusing { throw TestKafkaDown() }
            state.tombstones.append(key)
            return TokenTable.Position(partition: 0, offset: Int64(state.records.count + state.tombstones.count - 1))
        }
    }
}

struct TestKafkaDown: Error {}

/// Keys and JWTs for tests: an HS256 key "hs" and an ES256 key "es".
enum TestKeys {
    static let hsSecret = "a-test-secret-that-is-at-least-32-bytes-long"
    static let esPrivate = ES256PrivateKey()
    static var settings: RegistrySettings {
        RegistrySettings(verificationKeys: [
            .hs256(kid: "hs", secret: Array(hsSecret.utf8)), .es256(kid: "es", publicKeyPEM: esPrivate.publicKey.pemRepresentation),
        ])
    }

    /// The claims the registry reads (its own type: the tests sign what it verifies).
    typealias Claims = Authenticator.Claims

    /// A bearer header for `user`, signed by the key `kid` (`hs` or `es`), expiring in `expiresIn` seconds.
    /// `es-as-hs` makes an HS256 token that names the ES256 key (an algorithm-confusion attempt).
    static func bearer(
        _ user: String, kid: String = "hs", expiresIn: TimeInterval = 3_600, now: Date = Date(), secret: String = hsSecret,
        notBefore: TimeInterval? = nil, issuedAt: TimeInterval? = nil
    ) async throws -> String {
        let keys = JWTKeyCollection()
        let signingKid = kid == "es-as-hs" ? "es" : kid
        if kid == "es" {
            await keys.add(ecdsa: esPrivate, kid: "es")
        } else {
            await keys.add(hmac: HMACKey(from: secret), digestAlgorithm: .sha256, kid: JWKIdentifier(string: signingKid))
        }
        let token = try await keys.sign(
            Claims(
                sub: .init(value: user), exp: .init(value: now.addingTimeInterval(expiresIn)),
                nbf: notBefore.map { .init(value: now.addingTimeInterval($0)) }, iat: issuedAt.map { .init(value: now.addingTimeInterval($0)) }),
            kid: JWKIdentifier(string: signingKid))
        return "Bearer \(token)"
    }
}

/// A token of `bytes` bytes, as hex, distinct per `seed`.
func activityRequest(token: String = hexToken(1), frequent: Bool = false, version: String = "5.2.0") -> RegisterActivityTokenRequest {
    RegisterActivityTokenRequest(
        token: token, attributesType: "DeliveryAttributes", app: AppTarget(bundleId: "com.example.food", environment: .production),
        frequentUpdatesEnabled: frequent, appVersion: version)
}
