// libFuzzer target for every topic's message type, read as consumers read records; the
// properties are MessageChecks (Fuzz/Checks). Built and run by scripts/fuzz.sh only.
import FuzzChecks
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    MessageChecks.check(fuzzInput(data, size))
    return 0
}

runFuzzer(testOneInput)
