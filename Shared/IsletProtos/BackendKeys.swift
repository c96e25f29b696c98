import Crypto
import GRPCCore

/// The backends allowed to call a service's gRPC API: each with a name, an API key (sent as
/// `authorization: Bearer <key>`) and its permissions. `ISLET_GRPC_KEYS`:
/// `name=key:read+write,other=key2:read` (keys of at least 32 characters; only their SHA-256 is
/// kept).
public struct BackendKeys: Sendable {
    struct Backend: Sendable {
        var name: String
        var digest: [UInt8]
        var permissions: Set<BackendPermission>
    }

    let backends: [Backend]

    public var isEmpty: Bool { backends.isEmpty }
    public var names: [String] { backends.map(\.name) }

    /// Parses `name → key:permission+permission`. Errors never quote a key.
    public init(_ entries: [String: String]) throws(BackendKeysError) {
        var backends: [Backend] = []
        for (name, value) in entries.sorted(by: { $0.key < $1.key }) {
            guard let colon = value.lastIndex(of: ":") else {
                throw BackendKeysError("the entry of backend \"\(name.prefix(40))\" must be key:permissions (read, write, read+write)")
            }
            let key = value[..<colon]
            let permissions = value[value.index(after: colon)...].split(separator: "+").map { BackendPermission(rawValue: String($0)) }
            guard !permissions.isEmpty, permissions.allSatisfy({ $0 != nil }) else {
                throw BackendKeysError("the permissions of backend \"\(name.prefix(40))\" must be read, write or read+write")
            }
            guard key.utf8.count >= 32 else { throw BackendKeysError("the key of backend \"\(name.prefix(40))\" must be at least 32 characters") }
            let digest = Array(SHA256.hash(data: Array(key.utf8)))
            guard !backends.contains(where: { $0.digest == digest }) else {
                throw BackendKeysError("backend \"\(name.prefix(40))\" has the key of another backend")
            }
            backends.append(Backend(name: name, digest: digest, permissions: Set(permissions.compactMap { $0 })))
        }
        self.backends = backends
    }

    /// The backend whose key this is (compared by digest, in time independent of where it differs).
    func backend(key: String) -> Backend? {
        let digest = Array(SHA256.hash(data: Array(key.utf8)))
        var found: Backend?
        for backend in backends {
            var difference: UInt8 = 0
            for (a, b) in zip(backend.digest, digest) { difference |= a ^ b }
            if difference == 0 { found = backend }
        }
        return found
    }

    /// What an `authorization` value (`Bearer <key>`, one entry) allows, for a call that `needs` a permission.
    public enum Authorization: Sendable, Equatable {
        /// No bearer key, several, or one too long.
        case missing
        /// A key that is not one of the configured backends'.
        case unknownKey
        /// The backend named, without the permission needed; it holds `holds`.
        case denied(backend: String, holds: [BackendPermission])
        /// The backend named may make the call.
        case allowed(backend: String)

        /// Why a call is refused, for the caller (never quoting the key); `nil` when allowed.
        /// `send` says how a key is sent (`one 'authorization: Bearer <key>' metadata entry`).
        public func refusal(needs permission: BackendPermission, send: String) -> String? {
            switch self {
            case .missing: "a backend key is required: send \(send)"
            case .unknownKey: "the backend key is not one of the configured keys"
            case .denied(let backend, let holds):
                "backend \(backend) may not \(permission.rawValue): it holds \(holds.map(\.rawValue).joined(separator: "+"))"
            case .allowed: nil
            }
        }
    }

    /// Checks the `authorization` values a call carries (gRPC metadata entries, HTTP header
    /// fields) for a call that `needs` a permission: one `Bearer <key>` naming a configured
    /// backend that holds it.
    public func authorize(_ values: [String], needs permission: BackendPermission) -> Authorization {
        guard values.count == 1, let value = values.first, value.lowercased().hasPrefix("bearer "), value.utf8.count <= 1_024 else {
            return .missing
        }
        guard let backend = backend(key: String(value.dropFirst("bearer ".count))) else { return .unknownKey }
        guard backend.permissions.contains(permission) else {
            return .denied(backend: backend.name, holds: backend.permissions.sorted { $0.rawValue < $1.rawValue })
        }
        return .allowed(backend: backend.name)
    }
}

public struct BackendKeysError: Error, Sendable, CustomStringConvertible {
    public var description: String
    init(_ description: String) { self.description = description }
}

