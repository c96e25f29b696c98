import Foundation

/// A request id: its 16 bytes when it is a UUID in the form Islet makes them (lowercase), else the text.
enum PackedId: Sendable, Equatable {
    case uuid(UInt64, UInt64)
    case text(String)

    init(_ text: String) {
        // `UUID(uuidString:)` takes the canonical form only: without uppercase it formats back the same.
        if text.utf8.count == 36, !text.utf8.contains(where: { (65...90).contains($0) }), let uuid = UUID(uuidString: text) {
            let (high, low) = withUnsafeBytes(of: uuid.uuid) { ($0.loadUnaligned(as: UInt64.self), $0.loadUnaligned(fromByteOffset: 8, as: UInt64.self)) }
            self = .uuid(high, low)
        } else {
            self = .text(text)
        }
    }

    var text: String {
        switch self {
        case .text(let text): return text
        case .uuid(let high, let low):
            var bytes: uuid_t = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
            withUnsafeMutableBytes(of: &bytes) { buffer in
                buffer.storeBytes(of: high, as: UInt64.self)
                buffer.storeBytes(of: low, toByteOffset: 8, as: UInt64.self)
            }
            return UUID(uuid: bytes).uuidString.lowercased()
        }
    }
}
