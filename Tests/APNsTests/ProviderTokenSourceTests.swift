import APNsDispatcher
import Foundation
import JWTKit
import Testing

@Suite("Provider tokens per 30-minute window")
struct ProviderTokenSourceTests {
    /// The `iat` a token carries (read without its signature: only its claims matter here).
    private func issuedAt(_ token: String) throws -> TimeInterval {
        try DefaultJWTParser().parse(Array(token.utf8), as: Claims.self).payload.iat.value.timeIntervalSince1970
    }

    private struct Claims: JWTPayload {
        var iss: IssuerClaim
        var iat: IssuedAtClaim
        func verify(using algorithm: some JWTAlgorithm) throws {}
    }

    @Test("one token per window, issued at the window's start; a renewal mints one issued then, for the rest of the window")
    func windows() async throws {
        let source = ProviderTokenSource(key: signingKey)
        let start = 1_800_000_000.0 - 1_800_000_000.0.truncatingRemainder(dividingBy: 1_800)
        let first = try await source.current(now: Date(timeIntervalSince1970: start + 10))
        #expect(try issuedAt(first) == start)
        #expect(try await source.current(now: Date(timeIntervalSince1970: start + 1_799)) == first)

        source.renew(now: Date(timeIntervalSince1970: start + 600.5))
        let renewed = try await source.current(now: Date(timeIntervalSince1970: start + 600.5))
        #expect(renewed != first)
        #expect(try issuedAt(renewed) == start + 600)
        #expect(try await source.current(now: Date(timeIntervalSince1970: start + 1_000)) == renewed)

        let next = try await source.current(now: Date(timeIntervalSince1970: start + 1_800))
        #expect(try issuedAt(next) == start + 1_800)
    }

    @Test("after a renewal every concurrent first use gets the same fresh token, and a mint of the old window's token still under way does not replace it")
    func concurrentRenewal() async throws {
        let source = ProviderTokenSource(key: signingKey)
        let start = 1_800_000_000.0 - 1_800_000_000.0.truncatingRemainder(dividingBy: 1_800)
        async let stale = source.current(now: Date(timeIntervalSince1970: start + 10))
        source.renew(now: Date(timeIntervalSince1970: start + 300))
        let tokens = try await withThrowingTaskGroup(of: String.self) { group in
            for _ in 0..<20 { group.addTask { try await source.current(now: Date(timeIntervalSince1970: start + 301)) } }
            return try await group.reduce(into: Set<String>()) { $0.insert($1) }
        }
        _ = try await stale
        #expect(tokens.count == 1)
        let fresh = try #require(tokens.first)
        #expect(try issuedAt(fresh) == start + 300)
        #expect(try await source.current(now: Date(timeIntervalSince1970: start + 900)) == fresh)
    }
}
