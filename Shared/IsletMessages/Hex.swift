/// Lower-case hex text of bytes, written in one pass into the string's own storage: tokens (the
/// dispatcher turns one per push from its bytes), fingerprints and signatures.
public enum Hex {
    public static func lowercase(_ bytes: some Collection<UInt8>) -> String {
        String(unsafeUninitializedCapacity: bytes.count * 2) { text in
            var index = 0
            for byte in bytes {
                text[index] = digits[Int(byte >> 4)]
                text[index + 1] = digits[Int(byte & 0xF)]
                index += 2
            }
            return index
        }
    }

    private static let digits = Array("0123456789abcdef".utf8)
}
