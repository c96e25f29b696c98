#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// A loopback TCP port held by a listening socket of the test itself, so a server asked to listen
/// there fails as it would beside another process. Closed on ``close()``.
public final class TakenPort: @unchecked Sendable {
    public let port: Int
    private let descriptor: Int32

    public init() throws {
        #if canImport(Glibc)
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #else
        let fd = socket(AF_INET, SOCK_STREAM, 0)
        #endif
        guard fd >= 0 else { throw TakenPortError.socket(errno) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        address.sin_port = 0
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) { pointer in
            pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { sockaddrPointer in
                bind(fd, sockaddrPointer, length) == 0 && listen(fd, 1) == 0 && getsockname(fd, sockaddrPointer, &length) == 0
            }
        }
        guard bound else {
            let code = errno
            Self.close(fd)
            throw TakenPortError.socket(code)
        }
        self.descriptor = fd
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    public func close() { Self.close(descriptor) }

    private static func close(_ descriptor: Int32) {
        #if canImport(Glibc)
        _ = Glibc.close(descriptor)
        #else
        _ = Darwin.close(descriptor)
        #endif
    }
}

public enum TakenPortError: Error {
    case socket(Int32)
}
