// libFuzzer target for the widget-link parser (DeepLinkCodec.verify); the properties are
// LinkChecks (Fuzz/Checks). Built and run by scripts/fuzz.sh only.
import FuzzChecks
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    LinkChecks.check(fuzzInput(data, size))
    return 0
}

runFuzzer(testOneInput)
