import CGD

/// A true-colour picture in libgd: the one place Islet calls libgd (the thumbnailer; the tests,
/// benchmark and demo that make pictures). Colours are `0xRRGGBB`.
public struct RasterImage: ~Copyable {
    private let image: gdImagePtr

    /// A blank picture of `width`×`height`; `nil` when libgd cannot allocate it.
    public init?(width: Int, height: Int) {
        guard let image = gdImageCreateTrueColor(Int32(width), Int32(height)) else { return nil }
        self.image = image
    }

    /// Decodes JPEG or PNG `data`; `nil` when it does not decode. libgd's own complaints are not
    /// printed (a bad picture is an answer, not a log line).
    public init?(jpeg data: [UInt8]) { self.init(decoding: data, png: false) }
    public init?(png data: [UInt8]) { self.init(decoding: data, png: true) }

    private init?(decoding data: [UInt8], png: Bool) {
        Self.silenceLibgd
        var bytes = data
        let decoded = bytes.withUnsafeMutableBytes { buffer -> gdImagePtr? in
            png
                ? gdImageCreateFromPngPtr(Int32(buffer.count), buffer.baseAddress)
                : gdImageCreateFromJpegPtrEx(Int32(buffer.count), buffer.baseAddress, 1)
        }
        guard let decoded else { return nil }
        self.image = decoded
    }

    deinit { gdImageDestroy(image) }

    public var width: Int { Int(image.pointee.sx) }
    public var height: Int { Int(image.pointee.sy) }

    public func fillRectangle(x1: Int, y1: Int, x2: Int, y2: Int, colour: Int) {
        gdImageFilledRectangle(image, Int32(x1), Int32(y1), Int32(x2), Int32(y2), Int32(colour))
    }

    public func fillEllipse(centreX: Int, centreY: Int, width: Int, height: Int, colour: Int) {
        gdImageFilledEllipse(image, Int32(centreX), Int32(centreY), Int32(width), Int32(height), Int32(colour))
    }

    public func setPixel(x: Int, y: Int, colour: Int) { gdImageSetPixel(image, Int32(x), Int32(y), Int32(colour)) }

    public func pixel(x: Int, y: Int) -> Int { Int(gdImageGetTrueColorPixel(image, Int32(x), Int32(y))) }

    /// The centre square of this picture, resampled to `side`×`side`.
    public func centreSquare(side: Int) -> RasterImage? {
        guard let target = RasterImage(width: side, height: side) else { return nil }
        let square = min(width, height)
        gdImageCopyResampled(
            target.image, image, 0, 0, Int32((width - square) / 2), Int32((height - square) / 2), Int32(side), Int32(side), Int32(square),
            Int32(square))
        return target
    }

    /// The picture as a JPEG file of `quality` (0–100); `nil` when encoding failed.
    public func jpeg(quality: Int) -> [UInt8]? {
        var length: Int32 = 0
        return Self.bytes(gdImageJpegPtr(image, &length, Int32(quality)), length)
    }

    /// The picture as a PNG file; `nil` when encoding failed.
    public func png() -> [UInt8]? {
        var length: Int32 = 0
        return Self.bytes(gdImagePngPtr(image, &length), length)
    }

    private static func bytes(_ data: UnsafeMutableRawPointer?, _ length: Int32) -> [UInt8]? {
        guard let data else { return nil }
        defer { gdFree(data) }
        guard length > 0 else { return nil }
        return Array(UnsafeRawBufferPointer(start: data, count: Int(length)))
    }

    private static let silenceLibgd: Void = gdSetErrorMethod { _, _, _ in }
}
