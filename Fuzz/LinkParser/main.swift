// libFuzzer target for the widget-link parser (DeepLinkCodec.verify). Built only by
// scripts/fuzz-links.sh (ISLET_FUZZ=1 adds this target and instruments IsletLinks with
// -sanitize=fuzzer); the properties are in Fuzz/LinkChecks.
//
// SwiftPM gives every executable its own `main`, so libFuzzer's is not used: this one hands
// control to libFuzzer's driver, which calls LLVMFuzzerTestOneInput for each input.
import Foundation
import LinkChecks

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    LinkChecks.check(size == 0 || data == nil ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

@_silgen_name("LLVMFuzzerRunDriver")
func runFuzzer(
    _ argc: UnsafeMutablePointer<Int32>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>,
    _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> Int32
) -> Int32

var argc = CommandLine.argc
var argv = CommandLine.unsafeArgv
exit(runFuzzer(&argc, &argv, testOneInput))
