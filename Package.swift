// swift-tools-version: 6.1
//
// Islet: the server side of iOS Live Activities and the Dynamic Island.
//
// Layout (see docs/architecture.md):
//   Shared/<Module>/      code every service shares: message types, the Kafka wrapper, the service runtime
//   Services/<Service>/   one folder per service (a library with the logic, a thin executable)
//   Tests/<Target>Tests/  unit tests per target; integration and fault tests in their own targets
//   Benchmarks/           benchmark executables, run by scripts/bench-*.sh
import PackageDescription

let strict: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
]

let package = Package(
    name: "islet",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "IsletMessages", targets: ["IsletMessages"]),
        .library(name: "IsletKafka", targets: ["IsletKafka"]),
        .library(name: "IsletRuntime", targets: ["IsletRuntime"]),
        .library(name: "IsletProtos", targets: ["IsletProtos"]),
        .executable(name: "token-registry", targets: ["TokenRegistryExecutable"]),
        .executable(name: "islet-kafka-bench", targets: ["IsletKafkaBench"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-configuration", from: "1.4.0"),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
        .package(url: "https://github.com/swift-server/swift-prometheus", from: "2.4.1"),
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.28.1"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/vapor/jwt-kit", from: "5.7.1"),
        .package(url: "https://github.com/apple/swift-protobuf", from: "1.39.0"),
        .package(url: "https://github.com/grpc/grpc-swift-2", from: "2.4.3"),
        .package(url: "https://github.com/grpc/grpc-swift-protobuf", from: "2.4.1"),
        .package(url: "https://github.com/grpc/grpc-swift-nio-transport", from: "2.9.2"),
    ],
    targets: [
        // librdkafka (>= 2.3) through pkg-config; scripts/bootstrap.sh installs it.
        .systemLibrary(
            name: "CRdKafka",
            path: "Shared/CRdKafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),

        // The wire contract: every topic's message type, its key rule and its JSON conventions.
        .target(
            name: "IsletMessages",
            dependencies: [
                .product(name: "Crypto", package: "swift-crypto"),
            ],
            path: "Shared/IsletMessages",
            swiftSettings: strict
        ),

        // gRPC APIs: the .proto files and the Swift code generated from them (scripts/generate-protos.sh).
        .target(
            name: "IsletProtos",
            dependencies: [
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCProtobuf", package: "grpc-swift-protobuf"),
                .product(name: "SwiftProtobuf", package: "swift-protobuf"),
            ],
            path: "Shared/IsletProtos",
            exclude: ["token_registry.proto"],
            swiftSettings: strict
        ),

        // Kafka over librdkafka: producer, consumer groups, admin, typed helpers, mock cluster.
        .target(
            name: "IsletKafka",
            dependencies: [
                "CRdKafka",
                "IsletMessages",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Shared/IsletKafka",
            swiftSettings: strict
        ),

        // What every service executable needs: configuration, logging, metrics, /health, /metrics, shutdown.
        .target(
            name: "IsletRuntime",
            dependencies: [
                "IsletKafka",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "Prometheus", package: "swift-prometheus"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
                .product(name: "UnixSignals", package: "swift-service-lifecycle"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            path: "Shared/IsletRuntime",
            swiftSettings: strict
        ),

        // token-registry: push tokens and activity lifecycle (HTTP/JSON for the app, gRPC for backends).
        .target(
            name: "TokenRegistry",
            dependencies: [
                "IsletMessages", "IsletKafka", "IsletRuntime", "IsletProtos",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Services/TokenRegistry",
            swiftSettings: strict
        ),
        .executableTarget(
            name: "TokenRegistryExecutable",
            dependencies: ["TokenRegistry", "IsletRuntime"],
            path: "Services/TokenRegistryExecutable",
            swiftSettings: strict
        ),

        // Produce/consume throughput of the wrapper, compared by scripts/bench-kafka.sh with rdkafka_performance.
        .executableTarget(
            name: "IsletKafkaBench",
            dependencies: [
                "IsletKafka",
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Benchmarks/KafkaThroughput",
            swiftSettings: strict
        ),

        .testTarget(
            name: "IsletMessagesTests",
            dependencies: ["IsletMessages"],
            path: "Tests/IsletMessagesTests",
            resources: [.copy("Golden")],
            swiftSettings: strict
        ),
        .testTarget(
            name: "IsletKafkaTests",
            dependencies: [
                "IsletKafka",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/IsletKafkaTests",
            swiftSettings: strict
        ),
        // Needs a broker: ISLET_KAFKA_BOOTSTRAP, set by scripts/test.sh.
        .testTarget(
            name: "IsletKafkaIntegrationTests",
            dependencies: [
                "IsletKafka",
                "IsletMessages",
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Tests/IsletKafkaIntegrationTests",
            swiftSettings: strict
        ),
        // librdkafka's mock cluster: broker down/up and injected produce errors.
        .testTarget(
            name: "IsletKafkaFaultTests",
            dependencies: [
                "IsletKafka",
                .product(name: "Logging", package: "swift-log"),
            ],
            path: "Tests/IsletKafkaFaultTests",
            swiftSettings: strict
        ),
        // token-registry without a broker: validation, auth, the table, every HTTP route in process, gRPC through a real server.
        .testTarget(
            name: "TokenRegistryTests",
            dependencies: [
                "TokenRegistry", "IsletMessages", "IsletKafka", "IsletRuntime", "IsletProtos",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "GRPCCore", package: "grpc-swift-2"),
                .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Tests/TokenRegistryTests",
            swiftSettings: strict
        ),
        // token-registry against the broker: publish, rebuild after a restart, push-outcome invalidations.
        .testTarget(
            name: "TokenRegistryIntegrationTests",
            dependencies: [
                "TokenRegistry", "IsletMessages", "IsletKafka", "IsletRuntime",
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "JWTKit", package: "jwt-kit"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Tests/TokenRegistryIntegrationTests",
            swiftSettings: strict
        ),
        .testTarget(
            name: "IsletRuntimeTests",
            dependencies: [
                "IsletRuntime",
                .product(name: "Configuration", package: "swift-configuration"),
                .product(name: "Hummingbird", package: "hummingbird"),
                .product(name: "HummingbirdTesting", package: "hummingbird"),
                .product(name: "Logging", package: "swift-log"),
                .product(name: "Metrics", package: "swift-metrics"),
                .product(name: "ServiceLifecycle", package: "swift-service-lifecycle"),
            ],
            path: "Tests/IsletRuntimeTests",
            swiftSettings: strict
        ),
    ]
)
