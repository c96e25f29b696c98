import ArgumentParser
import AsyncHTTPClient
import Crypto
import Foundation
import IsletMessages
import JWTKit
import NIOCore
import NIOHTTP1

/// A random token for tests: 32 bytes, hex.
enum TestToken {
    static func random() -> String {
        var generator = SystemRandomNumberGenerator()
        return (0..<32).map { _ in String(format: "%02x", UInt8.random(in: 0...255, using: &generator)) }.joined()
    }
}
