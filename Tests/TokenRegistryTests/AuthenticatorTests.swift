import Foundation
import IsletRuntime
import IsletTesting
import IsletTokens
import Synchronization
import Testing
@testable import TokenRegistry

@Suite("The app's JWTs: time claims and lifetime")
struct AuthenticatorTests {
    static let now = Date(timeIntervalSince1970: 1_795_000_000)

    /// The user of a JWT with these claims (seconds from now), or the 401's message.
    static func verdict(expiresIn: TimeInterval = 3_600, notBefore: TimeInterval? = nil, issuedAt: TimeInterval? = nil) async throws -> String {
        let authenticator = try await Authenticator(settings: TestKeys.settings, clock: ManualClock(now))
        let bearer = try await TestKeys.bearer("alice", expiresIn: expiresIn, now: now, notBefore: notBefore, issuedAt: issuedAt)
        do {
            return try await authenticator.user(authorization: bearer)
        } catch {
            return "\(error)"
        }
    }

    @Test(
        "accepted: an hour's token, iat and nbf now or within the minute of leeway, a day's lifetime",
        arguments: [
            (3_600.0, nil, nil), (3_600, 0, 0), (3_600, 30, 30), (3_600, -600, -600), (86_400, nil, 0), (86_400 - 3_600, nil, -3_600),
        ] as [(TimeInterval, TimeInterval?, TimeInterval?)])
    func accepted(_ claims: (TimeInterval, TimeInterval?, TimeInterval?)) async throws {
        #expect(try await Self.verdict(expiresIn: claims.0, notBefore: claims.1, issuedAt: claims.2) == "alice")
    }

    @Test(
        "refused with 401: nbf an hour ahead, iat an hour ahead, a 100-year token, a token issued 10 days ago that is still valid",
        arguments: [
            (3_600.0, 3_600, nil, "not valid yet"), (3_600, nil, 3_600, "issued in the future"),
            (100 * 365 * 86_400, nil, nil, "valid for longer"), (100 * 365 * 86_400, nil, 0, "valid for longer"),
            (3_600, nil, -10 * 86_400, "valid for longer"), (-1, nil, nil, "expired"),
        ] as [(TimeInterval, TimeInterval?, TimeInterval?, String)])
    func refused(_ claims: (TimeInterval, TimeInterval?, TimeInterval?, String)) async throws {
        let verdict = try await Self.verdict(expiresIn: claims.0, notBefore: claims.1, issuedAt: claims.2)
        #expect(verdict.contains(claims.3), "\(verdict)")
    }

    @Test("settings: a lifetime of 0 is refused (it would refuse every JWT); a retention of 0 keeps tokens for ever and the sweeper waits for shutdown instead of ending the service")
    func lifetimeAndRetentionSettings() async throws {
        let keys = "k=\(String(repeating: "s", count: 40))"
        #expect(throws: ConfigurationError.self) { try RegistrySettings(from: .variables(["ISLET_AUTH_HS256_KEYS": keys, "ISLET_AUTH_MAX_LIFETIME_MS": "0"])) }
        let settings = try RegistrySettings(from: .variables(["ISLET_AUTH_HS256_KEYS": keys, "ISLET_TOKEN_RETENTION_MS": "0"]))
        #expect(settings.tokenRetention == .zero)
        #expect(try RegistrySettings(from: .variables(["ISLET_AUTH_HS256_KEYS": keys, "ISLET_TOKEN_RETENTION_MS": "2592000000"])).tokenRetention == .seconds(30 * 86_400))
        // The sweeper with retention 0 runs until cancelled, as a service of the group must: it
        // sweeps, waits for the next pass on the clock, sweeps again.
        let registry = Registry(table: TokenTable(), publisher: RecordingPublisher(), logger: quietLogger)
        let clock = ManualClock()
        let finished = Finished()
        let sweeper = Task {
            try? await TokenSweeper(registry: registry, retention: .zero, interval: .seconds(3_600), clock: clock).run()
            finished.value.store(true, ordering: .releasing)
        }
        for _ in 0..<2 {
            while clock.sleepers == 0 { await Task.yield() }
            let endedEarly = finished.value.load(ordering: .acquiring)
            #expect(!endedEarly, "the sweeper ended on its own: the service group would stop")
            clock.advance(3_600)
        }
        sweeper.cancel()
        await sweeper.value
        let ended = finished.value.load(ordering: .acquiring)
        #expect(ended)
    }

    @Test("a malformed key list does not echo its text (it holds secrets) in the start-up error")
    func keyListErrorHidesSecrets() {
        let secret = "this-is-a-secret-of-more-than-32-bytes-in-all"
        #expect(throws: ConfigurationError.self) {
            try RegistrySettings(from: .variables(["ISLET_AUTH_HS256_KEYS": "good=\(String(repeating: "s", count: 40)),bad:\(secret)"]))
        }
        do {
            _ = try RegistrySettings(from: .variables(["ISLET_AUTH_HS256_KEYS": "good=\(String(repeating: "s", count: 40)),bad:\(secret)"]))
        } catch {
            #expect(!"\(error)".contains("secret"), "\(error)")
            #expect("\(error)".contains("item 2"), "\(error)")
        }
    }
}

/// Set once a task finished.
final class Finished: Sendable {
    let value = Atomic<Bool>(false)
}
