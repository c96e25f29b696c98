import Foundation

/// Square JPEG thumbnails (Lyft's 72×72), made with libgd: decodes JPEG or PNG, crops the centre
/// square, resamples and encodes JPEG. The image's size is read from its header first, so a small
/// file that claims a huge picture is refused before anything is decoded.
public enum Thumbnailer {
    /// The largest picture decoded, per side.
    public static let maximumSide = 4_096

    /// One rung of the ladder: the side in pixels and the JPEG quality.
    public struct Size: Sendable, Hashable {
        public var side: Int
        public var quality: Int
        public init(side: Int, quality: Int) {
            self.side = side
            self.quality = quality
        }
    }

    /// From the best to the smallest: a payload that cannot hold one tries the next.
    public static let ladder: [Size] = [
        Size(side: 72, quality: 60), Size(side: 72, quality: 35), Size(side: 48, quality: 40), Size(side: 32, quality: 40),
    ]

    enum Format { case jpeg, png }

    /// The thumbnails of `image` at every size of `sizes`, each a JPEG file.
    public static func thumbnails(of image: [UInt8], sizes: [Size] = ladder) throws(ThumbnailError) -> [[UInt8]] {
        let (format, width, height) = try header(image)
        guard width > 0, height > 0, width <= maximumSide, height <= maximumSide else {
            throw ThumbnailError("the picture is \(width)×\(height); at most \(maximumSide) per side")
        }
        let decoded = format == .png ? RasterImage(png: image) : RasterImage(jpeg: image)
        guard let source = decoded else { throw ThumbnailError("the \(format) data could not be decoded") }
        var result: [[UInt8]] = []
        for size in sizes {
            guard let target = source.centreSquare(side: size.side) else { throw ThumbnailError("out of memory") }
            guard let encoded = target.jpeg(quality: size.quality) else { throw ThumbnailError("JPEG encoding failed") }
            result.append(encoded)
        }
        return result
    }

    /// The format and the picture's size, from the file's header (PNG's IHDR, JPEG's start-of-frame).
    static func header(_ bytes: [UInt8]) throws(ThumbnailError) -> (Format, Int, Int) {
        func be16(_ i: Int) -> Int { Int(bytes[i]) << 8 | Int(bytes[i + 1]) }
        func be32(_ i: Int) -> Int { be16(i) << 16 | be16(i + 2) }
        if bytes.count >= 24, bytes.starts(with: [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A]), Array(bytes[12..<16]) == Array("IHDR".utf8) {
            return (.png, be32(16), be32(20))
        }
        if bytes.count >= 4, bytes[0] == 0xFF, bytes[1] == 0xD8 {
            // Walk the markers to the first start-of-frame (SOF0–SOF15 but DHT, JPG and DAC).
            var i = 2
            while i + 9 < bytes.count {
                guard bytes[i] == 0xFF else { break }
                let marker = bytes[i + 1]
                if marker == 0xFF { i += 1; continue }
                if (0xC0...0xCF).contains(marker), ![0xC4, 0xC8, 0xCC].contains(marker) {
                    return (.jpeg, be16(i + 7), be16(i + 5))
                }
                if marker == 0xD9 || marker == 0xDA { break }
                i += 2 + be16(i + 2)
            }
            throw ThumbnailError("the JPEG has no frame header")
        }
        throw ThumbnailError("not a JPEG or PNG file")
    }
}
