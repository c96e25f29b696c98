// swift-tools-version: 6.1
//
// Islet's benchmarks: a package of their own (as swift-kafka-client keeps Benchmarks/), so that the
// product's package carries no benchmark executables and their dependencies. Each target is one
// executable in a folder here, run by a script in scripts/ (docs/PERFORMANCE.md):
//
//   swift build -c release --package-path Benchmarks --product islet-kafka-bench
//   $(swift build -c release --package-path Benchmarks --show-bin-path)/islet-kafka-bench --help
//
// The product's modules come from the package one folder up, by path; the other packages are the
// product's own (the same URLs and versions as ../Package.swift).
import PackageDescription

/// The settings of every target of ../Package.swift: Swift 6 language mode, `any` spelled out for
/// existentials, a file sees only the members of modules it imports itself.
let shared: [SwiftSetting] = [
    .swiftLanguageMode(.v6),
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
]

/// One of the product's modules (../Package.swift's library products).
func islet(_ name: String) -> Target.Dependency { .product(name: name, package: "islet") }

let argumentParser: Target.Dependency = .product(name: "ArgumentParser", package: "swift-argument-parser")
let asyncHTTPClient: Target.Dependency = .product(name: "AsyncHTTPClient", package: "async-http-client")
let crypto: Target.Dependency = .product(name: "Crypto", package: "swift-crypto")
let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")
let nioCore: Target.Dependency = .product(name: "NIOCore", package: "swift-nio")
let nioHTTP1: Target.Dependency = .product(name: "NIOHTTP1", package: "swift-nio")
let nioPosix: Target.Dependency = .product(name: "NIOPosix", package: "swift-nio")
let nioSSL: Target.Dependency = .product(name: "NIOSSL", package: "swift-nio-ssl")
let serviceLifecycle: Target.Dependency = .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")

let package = Package(
    name: "islet-benchmarks",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "islet-kafka-bench", targets: ["IsletKafkaBench"]),
        .executable(name: "islet-dispatch-bench", targets: ["IsletDispatchBench"]),
        .executable(name: "islet-content-bench", targets: ["IsletContentBench"]),
        .executable(name: "islet-stack-bench", targets: ["IsletStackBench"]),
        .executable(name: "islet-http-load", targets: ["IsletHTTPLoad"]),
    ],
    dependencies: [
        .package(name: "islet", path: ".."),
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.8.2"),
        .package(url: "https://github.com/swift-server/async-http-client", from: "1.37.0"),
        .package(url: "https://github.com/apple/swift-crypto", "3.12.3"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.16.2"),
        .package(url: "https://github.com/apple/swift-nio", from: "2.101.2"),
        .package(url: "https://github.com/apple/swift-nio-ssl", from: "2.37.6"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle", from: "2.13.0"),
    ],
    targets: [
        // Produce/consume throughput of the wrapper, compared by scripts/bench-kafka.sh with rdkafka_performance.
        .executableTarget(
            name: "IsletKafkaBench",
            dependencies: [islet("IsletKafka"), islet("IsletTokens"), argumentParser, logging],
            path: "KafkaThroughput"
        ),

        // End-to-end latency and memory per activity of the running product, for scripts/demo.sh --latency / --memory.
        .executableTarget(
            name: "IsletStackBench",
            dependencies: [
                islet("APNsSimulator"), islet("ContentService"), islet("IsletDemoKit"), islet("IsletKafka"),
                islet("IsletMessages"), islet("TokenRegistry"),
                argumentParser, asyncHTTPClient, nioCore,
            ],
            path: "Stack"
        ),

        // content-service's assembly and pipeline figures, for scripts/bench-content.sh.
        .executableTarget(
            name: "IsletContentBench",
            dependencies: [
                islet("ContentService"), islet("IsletKafka"), islet("IsletLinks"), islet("IsletMessages"),
                islet("IsletRuntime"), islet("IsletTokens"),
                argumentParser, logging, serviceLifecycle,
            ],
            path: "ContentService"
        ),

        // Loads and paces push requests for scripts/bench-dispatcher.sh.
        .executableTarget(
            name: "IsletDispatchBench",
            dependencies: [
                islet("APNsDispatcher"), islet("IsletKafka"), islet("IsletMessages"),
                argumentParser, asyncHTTPClient, crypto, logging, nioCore, nioSSL, nioHTTP1,
            ],
            path: "Dispatcher",
            exclude: ["aioapns_bench.py"]
        ),

        // Open-loop (constant-rate) HTTP/1.1 load with latency from the intended send time, for finding
        // the highest rate a service sustains within a p99 budget.
        .executableTarget(
            name: "IsletHTTPLoad",
            dependencies: [argumentParser, nioCore, nioPosix, nioHTTP1],
            path: "HTTPLoad"
        ),
    ]
)

for target in package.targets {
    target.swiftSettings = shared + (target.swiftSettings ?? [])
}
