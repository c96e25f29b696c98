import ArgumentParser
import ContentService
import Foundation
import IsletDemoKit
import Hummingbird
import IsletRuntime
import NIOCore
import ServiceLifecycle
import UnixSignals

/// Serves the photos the events point at (a courier's and a driver's), as a CDN would; `/health`
/// answers 200 (docker-compose.yml's dev profile runs it as `example-images`).
struct ServeImages: AsyncParsableCommand {
    @Option var host = "127.0.0.1"
    @Option var port = 8099

    func run() async throws {
        let router = Router()
        for (name, colours) in [("courier.jpg", (0xE8_6A_1F, 0x2B_3A_67)), ("driver.jpg", (0x1F_8A_70, 0xF2_E8_CF))] {
            let jpeg = Self.portrait(colours.0, colours.1)
            router.get(RouterPath(name)) { _, _ in
                Response(status: .ok, headers: [.contentType: "image/jpeg"], body: .init(byteBuffer: ByteBuffer(bytes: jpeg)))
            }
        }
        router.get("health") { _, _ in Response(status: .ok) }
        let app = Application(router: router, configuration: .init(address: .hostname(host, port: port)), logger: quiet)
        let server = Listener(app, name: "http", host: host, port: port, variables: ["--host", "--port"])
        try await ServiceGroup(configuration: .init(services: [server], gracefulShutdownSignals: [.sigterm, .sigint], logger: quiet)).run()
    }

    /// A 400×300 picture (a head and shoulders on a background), JPEG, made with libgd.
    static func portrait(_ background: Int, _ figure: Int) -> [UInt8] {
        let image = RasterImage(width: 400, height: 300)!
        image.fillRectangle(x1: 0, y1: 0, x2: 399, y2: 299, colour: background)
        image.fillEllipse(centreX: 200, centreY: 120, width: 110, height: 130, colour: figure)
        image.fillEllipse(centreX: 200, centreY: 300, width: 260, height: 180, colour: figure)
        return image.jpeg(quality: 85)!
    }
}
