import Foundation
import Hummingbird
import IsletMessages
import IsletTesting
import IsletTokens
import Logging
import NIOCore
import Synchronization
import Testing
@testable import ContentService

/// A real picture, encoded by libgd: three vertical bands (red, green, blue) of `width`×`height`.
func bands(width: Int, height: Int, png: Bool) -> [UInt8] {
    let image = RasterImage(width: width, height: height)!
    for (index, colour) in [0xFF0000, 0x00FF00, 0x0000FF].enumerated() {
        image.fillRectangle(x1: index * width / 3, y1: 0, x2: (index + 1) * width / 3 - 1, y2: height - 1, colour: colour)
    }
    return png ? image.png()! : image.jpeg(quality: 90)!
}

/// The size and the centre pixel's colour of a JPEG.
func inspect(_ jpeg: [UInt8]) throws -> (width: Int, height: Int, centre: (r: Int, g: Int, b: Int)) {
    #expect(jpeg.starts(with: [0xFF, 0xD8]), "a JPEG file")
    guard let image = RasterImage(jpeg: jpeg) else { throw TestSetupError("the JPEG does not decode") }
    let (w, h) = (image.width, image.height)
    let pixel = image.pixel(x: w / 2, y: h / 2)
    return (w, h, (pixel >> 16 & 0xFF, pixel >> 8 & 0xFF, pixel & 0xFF))
}

@Suite("Thumbnails")
struct ThumbnailTests {
    @Test("JPEG and PNG become square JPEG thumbnails of the centre, at every size of the ladder", arguments: [true, false])
    func thumbnails(png: Bool) throws {
        // 300×100: the centre square is the green band.
        let thumbnails = try Thumbnailer.thumbnails(of: bands(width: 300, height: 100, png: png))
        #expect(thumbnails.count == Thumbnailer.ladder.count)
        for (thumbnail, size) in zip(thumbnails, Thumbnailer.ladder) {
            let (width, height, centre) = try inspect(thumbnail)
            #expect(width == size.side && height == size.side)
            #expect(centre.g > 180 && centre.r < 80 && centre.b < 80, "the centre square (green) was kept: \(centre)")
        }
        #expect(thumbnails[0].count < 2_500, "a 72×72 JPEG is small: \(thumbnails[0].count) bytes")
        #expect(thumbnails.last!.count < thumbnails.first!.count)
    }

    @Test("what is not a picture, or claims a huge one, is refused before decoding")
    func refused() throws {
        #expect(throws: ThumbnailError.self) { try Thumbnailer.thumbnails(of: Array("<html>".utf8)) }
        #expect(throws: ThumbnailError.self) { try Thumbnailer.thumbnails(of: []) }
        // A PNG header claiming 100000×100000 (a decompression bomb).
        var bomb: [UInt8] = [0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0, 0, 0, 13] + Array("IHDR".utf8)
        bomb += [0x00, 0x01, 0x86, 0xA0, 0x00, 0x01, 0x86, 0xA0, 8, 2, 0, 0, 0]
        let error = #expect(throws: ThumbnailError.self) { try Thumbnailer.thumbnails(of: bomb) }
        #expect(error?.description.contains("100000") == true)
        // Truncated files do not crash the decoder.
        let jpeg = bands(width: 90, height: 90, png: false)
        #expect(throws: ThumbnailError.self) { try Thumbnailer.thumbnails(of: Array(jpeg.prefix(40))) }
        let png = bands(width: 90, height: 90, png: true)
        #expect(throws: ThumbnailError.self) { try Thumbnailer.thumbnails(of: Array(png.prefix(60))) }
    }

    @Test("fetched from allowed hosts only, within the size and time limits, without redirects; cached")
    func fetching() async throws {
        let hits = Mutex(0)
        let picture = bands(width: 120, height: 120, png: true)
        let router = Router()
        router.get("photo.png") { _, _ -> Response in
            hits.withLock { $0 += 1 }
            return Response(status: .ok, headers: [.contentType: "image/png"], body: .init(byteBuffer: ByteBuffer(bytes: picture)))
        }
        router.get("big.png") { _, _ in Response(status: .ok, body: .init(byteBuffer: ByteBuffer(repeating: 7, count: 300_000))) }
        router.get("slow.png") { _, _ -> Response in
            // Never answers in time: a clock nobody moves (the sleep ends when the fetch gives up).
            try await ManualClock().sleep(for: .seconds(30))
            return Response(status: .ok, body: .init(byteBuffer: ByteBuffer(bytes: picture)))
        }
        router.get("moved.png") { _, _ in Response(status: .found, headers: [.location: "http://127.0.0.1:1/photo.png"]) }
        let (ports, bound) = AsyncStream.makeStream(of: Int.self)
        let server = Application(
            router: router, configuration: .init(address: .hostname("127.0.0.1", port: 0)), onServerRunning: { channel in if let port = channel.localAddress?.port { bound.yield(port) } },
            logger: Logger(label: "test.images"))
        try await withThrowingDiscardingTaskGroup { group in
            group.addTask { try await server.runService() }
            var waiting = ports.makeAsyncIterator()
            let host = "127.0.0.1:\(try #require(await waiting.next()))"
            var settings = ThumbnailService.Settings(allowedHosts: [host, "*.example.com"])
            settings.maximumBytes = 100_000
            // Generous for a loaded CI machine and ThreadSanitizer (3 s was too short there); the
            // slow route answers far later still.
            settings.timeout = .seconds(8)
            let service = ThumbnailService(settings: settings, metrics: ContentMetrics(), logger: Logger(label: "test.thumbnails"))
            group.addTask { try await service.run() }

            #expect(service.isAllowed(URL(string: "http://\(host)/a.png")!))
            #expect(service.isAllowed(URL(string: "https://img.example.com/a.png")!))
            #expect(!service.isAllowed(URL(string: "https://example.com.evil.net/a.png")!))
            #expect(!service.isAllowed(URL(string: "http://127.0.0.1:1/a.png")!), "another port")
            #expect(!service.isAllowed(URL(string: "file:///etc/passwd")!))
            #expect(!service.isAllowed(URL(string: "http://user@\(host)/a.png")!))

            let urls = ["photo", "big", "slow", "moved"].map { "http://\(host)/\($0).png" } + ["http://not-allowed.test/photo.png"]
            let made = await service.thumbnails(for: urls)
            #expect(Set(made.keys) == ["http://\(host)/photo.png"])
            let photo = try #require(made["http://\(host)/photo.png"]?.first.flatMap { Data(base64Encoded: $0) })
            #expect(try inspect(Array(photo)).width == 72)
            _ = await service.thumbnails(for: [urls[0]])
            #expect(hits.withLock { $0 } == 1, "the second time comes from the cache")
            group.cancelAll()
        }
    }

    @Test("inline until a payload carrying the picture is delivered, then never again; smaller, then without data (URL kept) when it does not fit")
    func inlining() throws {
        let engine = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        let url = "https://img.example.com/ana.jpg"
        let small = try Thumbnailer.thumbnails(of: bands(width: 200, height: 200, png: false)).map { Data($0).base64EncodedString() }
        func image(_ request: PushRequest) throws -> [String: JSONValue]? {
            guard case .array(let expanded)? = try aps(request)["content-state"]?["layout"]?["expanded"] else { return nil }
            return expanded.compactMap { $0["remoteImage"]?.objectValue }.first
        }
        var fields: [String: JSONValue] = [
            "status": .string("courier_assigned"), "orderId": .string("42"),
            "courier": .object(["name": .string("Ana"), "photoUrl": .string(url)]),
        ]
        #expect(engine.assembler.imageURLs(for: event("DeliveryAttributes", sequence: 1, fields)) == [url])
        guard case .send(let first) = try engine.prepare(event("DeliveryAttributes", sequence: 1, fields), images: [url: small]) else {
            Issue.record("nothing sent")
            return
        }
        engine.commit(first)
        let inline = try #require(try image(first.requests[0]))
        #expect(inline["url"] == .string(url))
        #expect(inline["data"] != nil, "the first payload carries the picture")
        #expect(first.requests[0].payload.utf8.count <= 4_096)
        #expect(engine.memory(of: "com.example.food/order-42")?.inlinedImages == [], "not delivered yet")
        #expect(engine.memory(of: "com.example.food/order-42")?.pendingImages[first.requests[0].requestId]?.urls == [url])

        // Coalesced away before it was sent: the picture never reached the phone, the next payload carries it.
        func outcome(_ request: PushRequest, _ result: PushResult) -> PushOutcome {
            PushOutcome(requestId: request.requestId, activityId: "order-42", result: result, attempts: 1, completedAt: now, bundleId: "com.example.food")
        }
        fields["status"] = .string("out_for_delivery")
        guard case .send(let second) = try engine.prepare(event("DeliveryAttributes", sequence: 2, fields), images: [url: small]) else {
            Issue.record("nothing sent")
            return
        }
        engine.commit(second)
        engine.record(outcome(first.requests[0], .coalesced))
        #expect(try image(second.requests[0])?["data"] != nil, "inlined again: the first was not delivered yet")
        #expect(engine.memory(of: "com.example.food/order-42")?.inlinedImages == [])
        engine.record(outcome(second.requests[0], .delivered))
        #expect(engine.memory(of: "com.example.food/order-42")?.inlinedImages == [url])
        #expect(engine.memory(of: "com.example.food/order-42")?.pendingImages == [:])

        guard case .send(let third) = try engine.prepare(event("DeliveryAttributes", sequence: 3, fields), images: [url: small]) else {
            Issue.record("nothing sent")
            return
        }
        #expect(try image(third.requests[0])?["data"] == nil, "not again once delivered")
        #expect(try image(third.requests[0])?["url"] == .string(url))

        // Too large to inline at any size: the URL stays, the data goes, and the shrink is reported.
        let huge = [String](repeating: String(repeating: "A", count: 3_000), count: 2)
        let other = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        guard case .send(let shrunk) = try other.prepare(event("DeliveryAttributes", sequence: 1, fields), images: [url: huge]) else {
            Issue.record("nothing sent")
            return
        }
        #expect(try image(shrunk.requests[0])?["data"] == nil)
        #expect(try image(shrunk.requests[0])?["url"] == .string(url))
        #expect(shrunk.shrinks == ["inline image at size 2", "inline image data"])
        #expect(other.memory(of: "com.example.food/order-42")?.inlinedImages == nil || other.memory(of: "com.example.food/order-42")?.inlinedImages == [])
        // A smaller rung that fits is used.
        let fresh = ContentEngine(assembler: try assembler(), tokens: PartitionTokens.whole(), clock: ManualClock(now))
        guard case .send(let smaller) = try fresh.prepare(event("DeliveryAttributes", sequence: 1, fields), images: [url: [huge[0], small[2]]]) else {
            return
        }
        #expect(try image(smaller.requests[0])?["data"] == .string(small[2]))
        #expect(smaller.shrinks == ["inline image at size 2"])
    }
}
