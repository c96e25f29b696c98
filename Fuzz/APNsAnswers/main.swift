// libFuzzer target for the dispatcher's reading of APNs answers (the error body's reason and
// timestamp); the properties are APNsChecks (Fuzz/Checks). Built and run by scripts/fuzz.sh only.
import FuzzChecks
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    APNsChecks.check(fuzzInput(data, size))
    return 0
}

runFuzzer(testOneInput)
