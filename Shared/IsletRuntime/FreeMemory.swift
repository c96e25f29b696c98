import CMalloc
import Foundation

/// Gives back to the system the pages malloc holds free. glibc keeps what a process freed for its
/// own reuse: an instance that dropped partitions (a rebalance), or whose restore went through
/// large temporary buffers, keeps its high-water mark resident although it holds far less
/// (issue 24 measured 150 bytes of 580 per activity in content-service at 200,000 activities).
/// `malloc_trim(0)` returns every whole free page of every arena.
public enum FreeMemory {
    /// Returns the free pages now; `true` when some were returned.
    @discardableResult
    public static func release() -> Bool { malloc_trim(0) != 0 }

    /// The process's resident memory (`VmRSS`), in bytes (0 when unreadable).
    public static var resident: Int {
        guard let status = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8),
            let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
            let kilobytes = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap({ Int($0) })
        else { return 0 }
        return kilobytes * 1_024
    }
}
