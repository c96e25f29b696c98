// Hands control to libFuzzer. Built only with ISLET_FUZZ=1 (scripts/fuzz.sh): the symbol it calls
// exists only in the libFuzzer runtime that -sanitize=fuzzer links into the fuzz executables.
import Foundation

/// What libFuzzer calls with each input: its bytes and their count. Return 0. Each target names
/// its function `LLVMFuzzerTestOneInput` (`@_cdecl`) too: the runtime's own `main`, unused, refers
/// to that symbol, and the link fails without it.
public typealias FuzzTarget = @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32

/// Runs libFuzzer's driver with the program's arguments (corpus folders, `-max_total_time=…`) on
/// `target`, and exits with its status. SwiftPM gives every executable its own `main`, so
/// libFuzzer's is not used; this is the entry point it offers instead.
public func runFuzzer(_ target: FuzzTarget) -> Never {
    var argc = CommandLine.argc
    var argv = CommandLine.unsafeArgv
    exit(LLVMFuzzerRunDriver(&argc, &argv, target))
}

/// The bytes of one input.
public func fuzzInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> [UInt8] {
    guard let data, size > 0 else { return [] }
    return Array(UnsafeBufferPointer(start: data, count: size))
}

@_silgen_name("LLVMFuzzerRunDriver")
private func LLVMFuzzerRunDriver(
    _ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: FuzzTarget
) -> Int32
