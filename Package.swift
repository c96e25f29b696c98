// swift-tools-version: 6.1
//
// Islet: the server side of iOS Live Activities and the Dynamic Island.
//
// Layout (see docs/architecture.md):
//   Shared/<Module>/      code every service shares: message types, the Kafka wrapper, the service runtime
//   Services/<Service>/   one folder per service (a library with the logic, a thin executable)
//   Tests/<Target>Tests/  unit tests per target; integration and fault tests in their own targets
//   Benchmarks/           the benchmark executables, a package of their own (Benchmarks/Package.swift) that
//                         uses this one's library products; run by scripts/bench-*.sh
import Foundation
import PackageDescription

/// Settings every Swift target gets (applied in a loop at the end of this file): Swift 6's strict
/// concurrency is the tools version's default language mode; `any` is spelled out for existentials;
/// a file sees only the members of modules it imports itself.
let shared: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

/// scripts/fuzz.sh sets ISLET_FUZZ=1 (in a build directory of its own, .build-fuzz): the libFuzzer
/// targets (Fuzz/) are added, and the modules whose parsers they call are instrumented for them
/// (`fuzzed`). Other builds never see either.
let fuzzing = ProcessInfo.processInfo.environment["ISLET_FUZZ"] == "1"
let fuzzed: [SwiftSetting] = fuzzing ? [.unsafeFlags(["-sanitize=fuzzer"])] : []

/// The other packages' products the targets use, each named once.
let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")
let metrics: Target.Dependency = .product(name: "Metrics", package: "swift-metrics")
let dequeModule: Target.Dependency = .product(name: "DequeModule", package: "swift-collections")
let heapModule: Target.Dependency = .product(name: "HeapModule", package: "swift-collections")
let configuration: Target.Dependency = .product(name: "Configuration", package: "swift-configuration")
let argumentParser: Target.Dependency = .product(name: "ArgumentParser", package: "swift-argument-parser")
let serviceLifecycle: Target.Dependency = .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")
let unixSignals: Target.Dependency = .product(name: "UnixSignals", package: "swift-service-lifecycle")
let prometheus: Target.Dependency = .product(name: "Prometheus", package: "swift-prometheus")
let hummingbird: Target.Dependency = .product(name: "Hummingbird", package: "hummingbird")
let hummingbirdTesting: Target.Dependency = .product(name: "HummingbirdTesting", package: "hummingbird")
let crypto: Target.Dependency = .product(name: "Crypto", package: "swift-crypto")
let jwtKit: Target.Dependency = .product(name: "JWTKit", package: "jwt-kit")
let swiftProtobuf: Target.Dependency = .product(name: "SwiftProtobuf", package: "swift-protobuf")
let grpcCore: Target.Dependency = .product(name: "GRPCCore", package: "grpc-swift-2")
let grpcProtobuf: Target.Dependency = .product(name: "GRPCProtobuf", package: "grpc-swift-protobuf")
let grpcNIOTransportHTTP2: Target.Dependency = .product(name: "GRPCNIOTransportHTTP2", package: "grpc-swift-nio-transport")
let nioCore: Target.Dependency = .product(name: "NIOCore", package: "swift-nio")
let nioEmbedded: Target.Dependency = .product(name: "NIOEmbedded", package: "swift-nio")
let nioFoundationCompat: Target.Dependency = .product(name: "NIOFoundationCompat", package: "swift-nio")
let nioHTTP1: Target.Dependency = .product(name: "NIOHTTP1", package: "swift-nio")
let nioPosix: Target.Dependency = .product(name: "NIOPosix", package: "swift-nio")
let nioHPACK: Target.Dependency = .product(name: "NIOHPACK", package: "swift-nio-http2")
let nioHTTP2: Target.Dependency = .product(name: "NIOHTTP2", package: "swift-nio-http2")
let nioHTTPTypes: Target.Dependency = .product(name: "NIOHTTPTypes", package: "swift-nio-extras")
let httpTypes: Target.Dependency = .product(name: "HTTPTypes", package: "swift-http-types")
let nioSSL: Target.Dependency = .product(name: "NIOSSL", package: "swift-nio-ssl")
let x509: Target.Dependency = .product(name: "X509", package: "swift-certificates")
let swiftASN1: Target.Dependency = .product(name: "SwiftASN1", package: "swift-asn1")
let mustache: Target.Dependency = .product(name: "Mustache", package: "swift-mustache")
let yams: Target.Dependency = .product(name: "Yams", package: "Yams")
let asyncHTTPClient: Target.Dependency = .product(name: "AsyncHTTPClient", package: "async-http-client")

let package = Package(
    name: "islet",
    platforms: [.macOS(.v15)],
    products: [
        .library(name: "IsletMessages", targets: ["IsletMessages"]),
        .library(name: "IsletKafka", targets: ["IsletKafka"]),
        .library(name: "IsletRuntime", targets: ["IsletRuntime"]),
        .library(name: "IsletProtos", targets: ["IsletProtos"]),
        .library(name: "IsletLinks", targets: ["IsletLinks"]),
        // For the benchmarks (Benchmarks/Package.swift), which drive the services' libraries in process.
        .library(name: "IsletTokens", targets: ["IsletTokens"]),
        .library(name: "TokenRegistry", targets: ["TokenRegistry"]),
        .library(name: "APNsSimulator", targets: ["APNsSimulator"]),
        .library(name: "APNsDispatcher", targets: ["APNsDispatcher"]),
        .library(name: "ContentService", targets: ["ContentService"]),
        .library(name: "IsletDemoKit", targets: ["IsletDemoKit"]),
        .executable(name: "token-registry", targets: ["TokenRegistryExecutable"]),
        .executable(name: "apns-simulator", targets: ["APNsSimulatorExecutable"]),
        .executable(name: "apns-dispatcher", targets: ["APNsDispatcherExecutable"]),
        .executable(name: "content-service", targets: ["ContentServiceExecutable"]),
        .executable(name: "islet", targets: ["IsletCLI"]),
        .executable(name: "analytics-ingest", targets: ["AnalyticsIngestExecutable"]),
        .executable(name: "analytics-consumer", targets: ["AnalyticsConsumerExecutable"]),
        .executable(name: "islet-demo", targets: ["IsletDemo"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-metrics", from: "2.13.0"),
        .package(url: "https://github.com/apple/swift-collections", from: "1.6.0"),
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
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-http2", from: "1.46.0"),
        .package(url: "https://github.com/apple/swift-nio-extras", from: "1.35.2"),
        .package(url: "https://github.com/apple/swift-http-types", from: "1.5.1"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/apple/swift-certificates", from: "1.21.1"),
        .package(url: "https://github.com/apple/swift-asn1", from: "1.7.4"),
        .package(url: "https://github.com/hummingbird-project/swift-mustache", from: "2.1.1"),
        .package(url: "https://github.com/jpsim/Yams", from: "5.0.1"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
    ],
    targets: [
        // librdkafka (>= 2.3) through pkg-config; scripts/bootstrap.sh installs it.
        .systemLibrary(
            name: "CRdKafka",
            path: "Shared/CRdKafka",
            pkgConfig: "rdkafka",
            providers: [.apt(["librdkafka-dev"])]
        ),

        // libgd through pkg-config, for content-service's thumbnails; scripts/bootstrap.sh installs it.
        .systemLibrary(
            name: "CGD",
            path: "Shared/CGD",
            pkgConfig: "gdlib",
            providers: [.apt(["libgd-dev"])]
        ),

        // glibc's malloc.h: IsletRuntime gives the pages malloc keeps free back to the system.
        .systemLibrary(name: "CMalloc", path: "Shared/CMalloc"),

        // The wire contract: every topic's message type, its key rule and its JSON conventions.
        .target(
            name: "IsletMessages",
            dependencies: [
                crypto,
            ],
            path: "Shared/IsletMessages",
            swiftSettings: fuzzed
        ),

        // gRPC APIs: the .proto files and the Swift code generated from them (scripts/generate-protos.sh).
        .target(
            name: "IsletProtos",
            dependencies: [
                grpcCore, grpcProtobuf, swiftProtobuf, grpcNIOTransportHTTP2, serviceLifecycle, crypto,
            ],
            path: "Shared/IsletProtos",
            exclude: ["token_registry.proto", "activity_service.proto"]
        ),

        // Kafka over librdkafka: producer, consumer groups, admin, typed helpers, mock cluster.
        .target(
            name: "IsletKafka",
            dependencies: [
                "CRdKafka",
                "IsletMessages",
                logging, metrics, serviceLifecycle,
            ],
            path: "Shared/IsletKafka"
        ),

        // What every service executable needs: configuration, logging, metrics, /health, /metrics, shutdown.
        .target(
            name: "IsletRuntime",
            dependencies: [
                "IsletKafka",
                "CMalloc",
                configuration, logging, metrics, prometheus, serviceLifecycle, unixSignals, hummingbird,
                nioCore, nioHTTPTypes,
            ],
            path: "Shared/IsletRuntime"
        ),

        // Signed widget links: the analytics parameters content-service puts into every widgetUrl and
        // Link, and analytics-ingest verifies.
        .target(
            name: "IsletLinks",
            dependencies: [
                "IsletMessages",
                crypto,
            ],
            path: "Shared/IsletLinks",
            swiftSettings: fuzzed
        ),

        // What the test targets share (Tests/*): the test broker and topic readers, a process on the in-memory bus, loggers,
        // ids and tokens, timeouts.
        .target(
            name: "IsletTesting",
            dependencies: [
                "IsletKafka", "IsletMessages", "IsletProtos",
                grpcCore, grpcNIOTransportHTTP2, logging, serviceLifecycle,
            ],
            path: "Shared/IsletTesting"
        ),

        // The token table every service that sends or builds pushes keeps, rebuilt from islet.tokens.v1.
        .target(
            name: "IsletTokens",
            dependencies: [
                "IsletMessages", "IsletKafka",
                logging, metrics, serviceLifecycle,
            ],
            path: "Shared/IsletTokens"
        ),

        // token-registry: push tokens and activity lifecycle (HTTP/JSON for the app, gRPC for backends).
        .target(
            name: "TokenRegistry",
            dependencies: [
                "IsletMessages", "IsletKafka", "IsletRuntime", "IsletProtos", "IsletTokens",
                hummingbird, jwtKit, grpcCore, grpcNIOTransportHTTP2, logging, metrics,
                serviceLifecycle, httpTypes, swiftProtobuf, asyncHTTPClient,
            ],
            path: "Services/TokenRegistry",
            swiftSettings: fuzzed
        ),
        .executableTarget(
            name: "TokenRegistryExecutable",
            dependencies: ["TokenRegistry", "IsletRuntime"],
            path: "Services/TokenRegistryExecutable"
        ),

        // analytics-ingest: widget taps verified with the shared link codec, published to islet.clicks.v1.
        .target(
            name: "AnalyticsIngest",
            dependencies: [
                "IsletMessages", "IsletKafka", "IsletRuntime", "IsletLinks",
                hummingbird, nioCore, crypto, logging, metrics, prometheus, serviceLifecycle,
            ],
            path: "Services/AnalyticsIngest",
            swiftSettings: fuzzed
        ),
        .executableTarget(
            name: "AnalyticsIngestExecutable",
            dependencies: ["AnalyticsIngest", "IsletRuntime"],
            path: "Services/AnalyticsIngestExecutable"
        ),
        // analytics-consumer: the example analytics team — taps per attributes type × surface × element.
        .target(
            name: "AnalyticsConsumer",
            dependencies: [
                "IsletMessages", "IsletKafka", "IsletRuntime",
                logging, metrics, prometheus, serviceLifecycle, hummingbird,
            ],
            path: "Services/AnalyticsConsumer"
        ),
        .executableTarget(
            name: "AnalyticsConsumerExecutable",
            dependencies: ["AnalyticsConsumer", "IsletRuntime"],
            path: "Services/AnalyticsConsumerExecutable"
        ),

        // The APNs simulator: the provider API over HTTP/2 + TLS, with faults on command and a record of what it accepted.
        .target(
            name: "APNsSimulator",
            dependencies: [
                "IsletMessages", "IsletRuntime",
                nioCore, nioPosix, nioHTTP1, nioHTTP2, nioHPACK, nioSSL, crypto, x509, swiftASN1,
                hummingbird, logging, serviceLifecycle, jwtKit,
            ],
            path: "Services/APNsSimulator"
        ),
        .executableTarget(
            name: "APNsSimulatorExecutable",
            dependencies: [
                "APNsSimulator", "IsletRuntime",
                hummingbird, logging, serviceLifecycle, unixSignals,
            ],
            path: "Services/APNsSimulatorExecutable"
        ),

        // apns-dispatcher: HTTP/2 to APNs with budgets, coalescing, retries and one outcome per request.
        .target(
            name: "APNsDispatcher",
            dependencies: [
                "IsletMessages", "IsletKafka", "IsletRuntime", "IsletTokens",
                dequeModule, httpTypes, heapModule, nioCore, nioPosix, nioHTTP1, nioHTTP2, nioHPACK,
                nioSSL, crypto, logging, metrics, serviceLifecycle, hummingbird, jwtKit,
            ],
            path: "Services/APNsDispatcher",
            swiftSettings: fuzzed
        ),
        .executableTarget(
            name: "APNsDispatcherExecutable",
            dependencies: ["APNsDispatcher", "IsletRuntime"],
            path: "Services/APNsDispatcherExecutable"
        ),

        // content-service: domain events → ActivityKit payloads from templates kept as data.
        .target(
            name: "ContentService",
            dependencies: [
                "IsletMessages", "IsletLinks", "IsletKafka", "IsletRuntime", "IsletTokens", "IsletProtos", "CGD",
                heapModule, dequeModule, asyncHTTPClient, nioCore, nioHTTP1, nioPosix, crypto, grpcCore,
                swiftProtobuf, hummingbird, mustache, yams, logging, metrics, serviceLifecycle,
                grpcNIOTransportHTTP2,
            ],
            path: "Services/ContentService",
            exclude: ["Templates"]
        ),
        .executableTarget(
            name: "ContentServiceExecutable",
            dependencies: ["ContentService", "IsletRuntime"],
            path: "Services/ContentServiceExecutable"
        ),

        // The demo's app and backend as a library: the demo plays it, the stack benchmarks drive the product with it.
        .target(
            name: "IsletDemoKit",
            dependencies: [
                "APNsSimulator", "ContentService", "IsletKafka", "IsletMessages", "TokenRegistry",
                asyncHTTPClient, jwtKit, logging, nioCore, nioHTTP1,
            ],
            path: "Tools/IsletDemoKit"
        ),

        // The local demo (scripts/demo.sh): topics, a mock broker, the pictures, the scenarios.
        .executableTarget(
            name: "IsletDemo",
            dependencies: [
                "ContentService", "IsletDemoKit", "IsletKafka", "IsletMessages", "IsletRuntime",
                argumentParser, hummingbird, nioCore, serviceLifecycle, unixSignals,
            ],
            path: "Tools/IsletDemo"
        ),

        // The admin CLI `islet` (docs/cli.md): publish events, register test tokens, tail topics, look up activities.
        .executableTarget(
            name: "IsletCLI",
            dependencies: [
                "IsletKafka", "IsletMessages", "IsletProtos",
                argumentParser, asyncHTTPClient, crypto, grpcCore, grpcNIOTransportHTTP2, jwtKit,
                logging, nioCore, swiftProtobuf, nioHTTP1,
            ],
            path: "Tools/IsletCLI"
        ),

        .testTarget(
            name: "IsletMessagesTests",
            dependencies: ["IsletMessages", crypto],
            path: "Tests/IsletMessagesTests",
            resources: [.copy("Golden")]
        ),
        .testTarget(
            name: "IsletKafkaTests",
            dependencies: [
                "IsletKafka",
                "IsletTesting",
                logging,
            ],
            path: "Tests/IsletKafkaTests"
        ),
        // Needs a broker: ISLET_KAFKA_BOOTSTRAP, set by scripts/test.sh.
        .testTarget(
            name: "IsletKafkaIntegrationTests",
            dependencies: [
                "IsletTesting",
                "IsletKafka",
                "IsletMessages",
                logging, serviceLifecycle,
            ],
            path: "Tests/IsletKafkaIntegrationTests"
        ),
        // librdkafka's mock cluster: broker down/up and injected produce errors.
        .testTarget(
            name: "IsletKafkaFaultTests",
            dependencies: [
                "IsletTesting",
                "IsletKafka",
                "IsletMessages",
                logging,
            ],
            path: "Tests/IsletKafkaFaultTests"
        ),
        // token-registry without a broker: validation, auth, the table, every HTTP route in process, gRPC through a real server.
        .testTarget(
            name: "TokenRegistryTests",
            dependencies: [
                "IsletTesting",
                "TokenRegistry", "IsletMessages", "IsletKafka", "IsletRuntime", "IsletProtos", "IsletTokens",
                hummingbird, hummingbirdTesting, jwtKit, grpcCore, grpcNIOTransportHTTP2, logging,
                serviceLifecycle, httpTypes, swiftProtobuf,
            ],
            path: "Tests/TokenRegistryTests"
        ),
        // token-registry against the broker: publish, rebuild after a restart, push-outcome invalidations.
        .testTarget(
            name: "TokenRegistryIntegrationTests",
            dependencies: [
                "IsletTesting",
                "TokenRegistry", "IsletMessages", "IsletKafka", "IsletRuntime", "IsletTokens",
                hummingbird, hummingbirdTesting, jwtKit, logging, serviceLifecycle, httpTypes,
            ],
            path: "Tests/TokenRegistryIntegrationTests"
        ),
        // The APNs simulator and the dispatcher without a broker: validation, JWTs, policies, and the
        // HTTP/2 client against the simulator over TLS with every APNs answer and fault.
        .testTarget(
            name: "APNsTests",
            dependencies: [
                "IsletTesting",
                // TokenRegistry: the answer table is checked against the registry's use of it.
                "APNsSimulator", "APNsDispatcher", "IsletMessages", "IsletTokens", "IsletRuntime", "TokenRegistry",
                crypto, nioCore, logging, serviceLifecycle, x509, swiftASN1, nioHTTP2, nioPosix,
                nioHPACK, nioEmbedded, nioSSL, jwtKit, hummingbird, hummingbirdTesting,
            ],
            path: "Tests/APNsTests"
        ),
        // The delivery contract by deterministic simulation: the dispatchers' real decision code on a
        // simulated cluster, APNs and phones, thousands of seeds of rebalances, restarts and faults.
        .testTarget(
            name: "SimulationTests",
            dependencies: [
                "APNsDispatcher", "ContentService", "TokenRegistry", "IsletMessages", "IsletKafka", "IsletTokens", "IsletLinks",
                heapModule, logging, nioCore,
            ],
            path: "Tests/SimulationTests"
        ),
        // apns-dispatcher against the broker and the simulator: requests in, pushes out, one outcome each.
        .testTarget(
            name: "APNsDispatcherIntegrationTests",
            dependencies: [
                "IsletTesting",
                "APNsSimulator", "APNsDispatcher", "IsletMessages", "IsletKafka", "IsletRuntime", "IsletTokens",
                crypto, logging, serviceLifecycle,
            ],
            path: "Tests/APNsDispatcherIntegrationTests"
        ),
        .testTarget(
            name: "ContentServiceTests",
            dependencies: [
                "IsletTesting",
                "ContentService", "IsletMessages", "IsletLinks", "IsletKafka", "IsletRuntime", "IsletTokens", "IsletProtos",
                hummingbird, hummingbirdTesting, httpTypes, yams, mustache, nioCore, grpcCore,
                grpcNIOTransportHTTP2, swiftProtobuf, logging, serviceLifecycle,
            ],
            path: "Tests/ContentServiceTests",
            exclude: ["Golden"]
        ),
        // analytics-ingest and analytics-consumer without a broker: every verdict, the HTTP API in process, the counts.
        .testTarget(
            name: "AnalyticsIngestTests",
            dependencies: [
                "IsletTesting",
                "AnalyticsIngest", "AnalyticsConsumer", "IsletKafka", "IsletLinks", "IsletMessages", "IsletRuntime",
                hummingbird, hummingbirdTesting, logging, prometheus,
            ],
            path: "Tests/AnalyticsIngestTests"
        ),
        // analytics-ingest and analytics-consumer against the broker.
        .testTarget(
            name: "AnalyticsIntegrationTests",
            dependencies: [
                "IsletTesting",
                "AnalyticsIngest", "AnalyticsConsumer", "IsletLinks", "IsletMessages", "IsletKafka", "IsletRuntime",
                hummingbird, hummingbirdTesting, logging, serviceLifecycle,
            ],
            path: "Tests/AnalyticsIntegrationTests"
        ),
        .testTarget(
            name: "IsletLinksTests",
            dependencies: ["IsletLinks", "IsletMessages", "IsletTesting", crypto],
            path: "Tests/IsletLinksTests"
        ),
        // The properties the fuzzers check (Fuzz/Checks, one enum per parser), and the tests that replay
        // every fuzzer's seeds and saved failures through them in the normal test run.
        .target(
            name: "FuzzChecks",
            dependencies: ["IsletLinks", "IsletMessages", "IsletKafka", "IsletRuntime", "TokenRegistry", "AnalyticsIngest", "APNsDispatcher", httpTypes],
            path: "Fuzz/Checks"
        ),
        .testTarget(
            name: "FuzzTests",
            dependencies: ["FuzzChecks"],
            path: "Tests/FuzzTests"
        ),
        .testTarget(
            name: "IsletRuntimeTests",
            dependencies: [
                "IsletRuntime", "IsletTesting",
                "IsletKafka", "IsletMessages",
                configuration, hummingbird, hummingbirdTesting, logging, metrics, serviceLifecycle,
                nioCore, nioEmbedded, nioHTTPTypes, httpTypes, nioFoundationCompat, prometheus,
            ],
            path: "Tests/IsletRuntimeTests"
        ),
        // The whole product as processes (scripts/test.sh runs these with ISLET_E2E=1 on a broker of their own):
        // happy paths, kill -9 and SIGTERM, APNs faults, hostile input; the ledger of push requests and outcomes.
        .testTarget(
            name: "EndToEndTests",
            dependencies: [
                "IsletTesting",
                "APNsSimulator", "AnalyticsConsumer", "ContentService", "TokenRegistry", "IsletKafka", "IsletLinks", "IsletMessages", "IsletProtos",
                "IsletRuntime", asyncHTTPClient, grpcCore, grpcNIOTransportHTTP2, nioCore, nioHTTP1, crypto, jwtKit,
                logging, swiftProtobuf,
            ],
            path: "Tests/EndToEndTests",
            exclude: ["Golden"]
        ),
        // The CLI: argument parsing and formatting; publish + tail against the broker (ISLET_KAFKA_BOOTSTRAP);
        // publish over content-service's HTTP API, served on a local port.
        .testTarget(
            name: "IsletCLITests",
            dependencies: [
                "IsletTesting",
                "IsletCLI", "IsletKafka", "IsletMessages", "IsletProtos",
                "ContentService", "IsletLinks", "IsletRuntime", "IsletTokens",
                hummingbird, hummingbirdTesting, argumentParser, jwtKit, crypto, logging, swiftProtobuf,
            ],
            path: "Tests/IsletCLITests"
        ),
    ]
)

// The fuzzers: one libFuzzer executable per parser that takes outside input (scripts/fuzz.sh
// names them by the first word), each a main.swift in Fuzz/<folder> that hands its FuzzChecks
// property to FuzzDriver; seeds and saved failures next to it.
if fuzzing {
    package.targets.append(.target(name: "FuzzDriver", path: "Fuzz/Driver"))
    for (name, target, folder) in [
        ("links", "IsletLinksFuzz", "LinkParser"),
        ("registry", "RegistryBodiesFuzz", "RegistryBodies"),
        ("ingest", "IngestBodiesFuzz", "IngestBodies"),
        ("messages", "TopicMessagesFuzz", "TopicMessages"),
        ("apns", "APNsAnswersFuzz", "APNsAnswers"),
    ] {
        package.products.append(.executable(name: "islet-\(name)-fuzz", targets: [target]))
        package.targets.append(
            .executableTarget(
                name: target,
                dependencies: ["FuzzChecks", "FuzzDriver"],
                path: "Fuzz/\(folder)",
                exclude: ["dictionary", "regressions", "seeds"],
                swiftSettings: fuzzed,
                linkerSettings: [.unsafeFlags(["-sanitize=fuzzer", "-use-ld=lld"])]
            ))
    }
}

for target in package.targets where target.type != .system {
    target.swiftSettings = shared + (target.swiftSettings ?? [])
}
