import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import IsletMessages
import JWTKit
import NIOCore
import NIOHTTP1

/// token-registry's answer, in one line.
enum RegistryAnswer {
    private struct Success: Decodable {
        struct Token: Decodable {
            var state: String
            var tokenFingerprint: String
        }
        var change: String
        var token: Token
    }

    static func describe(status: Int, body: [UInt8], activityId: String) -> String {
        let decoder = JSONDecoder()
        if (200..<300).contains(status), let answer = try? decoder.decode(Success.self, from: Data(body)) {
            return "\(status) \(answer.change) \(activityId): state \(answer.token.state), token \(answer.token.tokenFingerprint)"
        }
        return ServiceHTTP.refusal(status: status, body: body)
    }
}
