import ArgumentParser
import AsyncHTTPClient
import Foundation
import IsletDemoKit
import NIOCore
import NIOHTTP1

/// What /proc says about a process of the product.
enum ProcessStats {
    /// `name=pid` options.
    static func parse(_ options: [String]) throws -> [(String, Int32)] {
        try options.map { entry in
            let parts = entry.split(separator: "=", maxSplits: 1)
            guard parts.count == 2, let pid = Int32(parts[1]) else { throw ValidationError("--process takes name=pid, not \(entry)") }
            return (String(parts[0]), pid)
        }
    }

    /// VmRSS of a process, from /proc.
    static func residentBytes(pid: Int32) throws -> Int {
        let status = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
        guard let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = Int(line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first ?? "")
        else { throw ValidationError("no VmRSS for process \(pid)") }
        return kilobytes * 1_024
    }

    /// User and system CPU time of a process so far, in seconds (/proc/<pid>/stat, fields 14 and 15).
    static func cpuSeconds(pid: Int32) throws -> Double {
        let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
        // The command name (field 2) is in parentheses and may hold spaces: count from after it.
        guard let close = stat.lastIndex(of: ")") else { throw ValidationError("unreadable /proc/\(pid)/stat") }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let user = Double(fields[11]), let system = Double(fields[12]) else { throw ValidationError("unreadable /proc/\(pid)/stat") }
        return (user + system) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }
}

/// A service's Prometheus metrics at one moment: each sample line's name, labels and value.
struct PrometheusSample {
    struct Sample: Hashable {
        var name: String
        var labels: [String: String]
    }
    var samples: [Sample: Double] = [:]

    static func scrape(_ url: String) async throws -> PrometheusSample {
        let response = try await HTTPClient.shared.execute(HTTPClientRequest(url: url), timeout: .seconds(30))
        guard response.status == .ok else { throw ValidationError("\(url) answered \(response.status)") }
        return PrometheusSample(text: String(buffer: try await response.body.collect(upTo: 1 << 24)))
    }

    /// Prometheus's text format: `name{label="value",...} number`, `#` lines are comments.
    init(text: String) {
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            guard let space = line.lastIndex(of: " "), let value = Double(line[line.index(after: space)...]) else { continue }
            let series = line[..<space]
            var labels: [String: String] = [:]
            let name: Substring
            if let open = series.firstIndex(of: "{"), series.hasSuffix("}") {
                name = series[..<open]
                for pair in series[series.index(after: open)..<series.index(before: series.endIndex)].split(separator: ",") {
                    let parts = pair.split(separator: "=", maxSplits: 1)
                    if parts.count == 2 { labels[String(parts[0])] = String(parts[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))) }
                }
            } else {
                name = series
            }
            samples[Sample(name: String(name), labels: labels), default: 0] += value
        }
    }

    private init(samples: [Sample: Double]) { self.samples = samples }

    /// The family's value summed over its label sets (0 when absent).
    func sum(_ name: String) -> Double { samples.filter { $0.key.name == name }.values.reduce(0, +) }

    /// The family's values summed by one label.
    func byLabel(_ name: String, _ label: String) -> [String: Double] {
        samples.filter { $0.key.name == name }.reduce(into: [:]) { $0[$1.key.labels[label] ?? "", default: 0] += $1.value }
    }

    /// What changed since `earlier` (counters).
    func subtracting(_ earlier: PrometheusSample) -> PrometheusSample {
        PrometheusSample(samples: samples.reduce(into: [:]) { $0[$1.key] = $1.value - (earlier.samples[$1.key] ?? 0) })
    }
}
