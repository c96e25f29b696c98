import Foundation
import LinkChecks
import Testing

/// Replays the link fuzzer's seeds and every input it ever found crashing
/// (Fuzz/LinkParser/seeds and Fuzz/LinkParser/regressions; scripts/fuzz-links.sh saves new ones
/// there), through the same property checks the fuzzer runs. A property that fails traps.
@Suite("Link fuzzer regressions")
struct FuzzRegressionTests {
    static let fuzzDirectory = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Fuzz/LinkParser")

    static func inputs(_ folder: String) throws -> [(name: String, bytes: [UInt8])] {
        let directory = fuzzDirectory.appendingPathComponent(folder)
        let names = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { !$0.hasPrefix(".") }.sorted()
        return try names.map { ($0, Array(try Data(contentsOf: directory.appendingPathComponent($0)))) }
    }

    @Test("the seeds and every saved crashing input pass the fuzzer's properties")
    func replay() throws {
        let seeds = try Self.inputs("seeds")
        #expect(seeds.count >= 5, "the seed corpus is in the repository")
        for (_, bytes) in try seeds + Self.inputs("regressions") {
            LinkChecks.check(bytes)
        }
    }
}
