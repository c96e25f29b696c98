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
            path: "Shared/IsletMessages",
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
