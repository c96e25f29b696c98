import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import IsletMessages
import JWTKit
import NIOCore
import NIOHTTP1

struct BearerClaims: JWTPayload {
    var sub: SubjectClaim
    var exp: ExpirationClaim
    var iat: IssuedAtClaim
    var iss: IssuerClaim?
    var aud: AudienceClaim?

    func verify(using algorithm: some JWTAlgorithm) async throws {
        try exp.verifyNotExpired()
    }
}
