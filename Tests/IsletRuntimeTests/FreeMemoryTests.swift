import Testing
@testable import IsletRuntime

@Suite("Free memory given back")
struct FreeMemoryTests {
    @Test("pages malloc keeps free after a burst of allocations are given back to the system")
    func released() {
        // 2,000,000 small blocks (about 260 MB), every 64th kept: the free ones sit between live
        // ones, so free() cannot give their pages back by itself. The resident size is the whole
        // process's, and other tests run meanwhile: three tries, one must show the drop.
        var drops: [Int] = []
        for _ in 0..<3 {
            var blocks: [[UInt8]] = []
            blocks.reserveCapacity(2_000_000)
            for index in 0..<2_000_000 { blocks.append([UInt8](repeating: UInt8(truncatingIfNeeded: index), count: 100)) }
            let kept = stride(from: 0, to: blocks.count, by: 64).map { blocks[$0] }
            blocks = []
            let before = FreeMemory.resident
            FreeMemory.release()
            drops.append(before - FreeMemory.resident)
            withExtendedLifetime(kept) {}
            if drops.last! > 64 << 20 { break }
        }
        #expect(drops.contains { $0 > 64 << 20 }, "resident size fell by \(drops.map { $0 >> 20 }) MB")
    }
}
