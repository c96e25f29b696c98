// libFuzzer target for analytics-ingest's HTTP bodies (one tap, a batch), each tap judged by
// TapVerifier; the properties are IngestChecks (Fuzz/Checks). Built and run by scripts/fuzz.sh only.
import FuzzChecks
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    IngestChecks.check(fuzzInput(data, size))
    return 0
}

runFuzzer(testOneInput)
