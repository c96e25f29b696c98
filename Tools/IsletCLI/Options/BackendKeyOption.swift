import ArgumentParser
import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import IsletMessages
import IsletProtos
import SwiftProtobuf

/// The backend key the gRPC lookups present (`authorization: Bearer <key>`; the services'
/// `ISLET_GRPC_KEYS` must list it with `read`).
struct BackendKeyOption: ParsableArguments {
    @Option(name: .customLong("grpc-key"), help: "The backend key for the gRPC APIs (default: $ISLET_CLI_GRPC_KEY).")
    var key: String?

    func metadata(environment: [String: String] = ProcessInfo.processInfo.environment) throws -> Metadata {
        guard let key = key ?? environment["ISLET_CLI_GRPC_KEY"], !key.isEmpty else {
            throw ValidationError("the gRPC APIs need a backend key: --grpc-key or ISLET_CLI_GRPC_KEY (one of the services' ISLET_GRPC_KEYS, with read)")
        }
        return ["authorization": "Bearer \(key)"]
    }
}
