// libFuzzer target for token-registry's HTTP bodies (decoded as the routes do, then validated);
// the properties are RegistryChecks (Fuzz/Checks). Built and run by scripts/fuzz.sh only.
import FuzzChecks
import FuzzDriver

@_cdecl("LLVMFuzzerTestOneInput")
public func testOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    RegistryChecks.check(fuzzInput(data, size))
    return 0
}

runFuzzer(testOneInput)
