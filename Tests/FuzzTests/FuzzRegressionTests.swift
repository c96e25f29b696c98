import Foundation
import FuzzChecks
import Testing

/// Replays every fuzzer's seeds and every input it ever found failing (Fuzz/<target>/seeds and
/// Fuzz/<target>/regressions; scripts/fuzz.sh saves new ones there) through the same property
/// checks the fuzzer runs. A property that fails traps.
@Suite("Fuzzer regressions")
struct FuzzRegressionTests {
    static let fuzzDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz")

    /// Each fuzz target's folder and the properties its fuzzer checks (its main.swift calls the same).
    static let checks: [String: @Sendable ([UInt8]) -> Void] = [
        "LinkParser": LinkChecks.check,
        "RegistryBodies": RegistryChecks.check,
        "IngestBodies": IngestChecks.check,
        "TopicMessages": MessageChecks.check,
        "APNsAnswers": APNsChecks.check,
    ]

    static func inputs(_ target: String, _ folder: String) throws -> [(name: String, bytes: [UInt8])] {
        let directory = fuzzDirectory.appendingPathComponent(target).appendingPathComponent(folder)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { !$0.hasPrefix(".") }.sorted()
        return try names.map { ($0, Array(try Data(contentsOf: directory.appendingPathComponent($0)))) }
    }

    @Test("the seeds and every saved failing input pass the fuzzer's properties", arguments: checks.keys.sorted())
    func replay(target: String) throws {
        let seeds = try Self.inputs(target, "seeds")
        #expect(seeds.count >= 5, "the seed corpus is in the repository")
        let check = try #require(Self.checks[target])
        for (_, bytes) in try seeds + Self.inputs(target, "regressions") {
            check(bytes)
        }
    }

    @Test("every fuzz target in Fuzz/ is replayed here")
    func everyTarget() throws {
        let folders = try FileManager.default.contentsOfDirectory(atPath: Self.fuzzDirectory.path).filter {
            FileManager.default.fileExists(atPath: Self.fuzzDirectory.appendingPathComponent($0).appendingPathComponent("main.swift").path)
        }
        #expect(Set(folders) == Set(Self.checks.keys))
    }
}
