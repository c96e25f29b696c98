import Hummingbird
import IsletMessages
import IsletRuntime

/// What the API makes of a body's bytes, apart from the transport (the body fuzzer calls it too).
package enum IngestBody {
    /// `Body` by Islet's JSON conventions; otherwise 400 `malformedBody` naming the field at fault.
    package static func decode<Body: Decodable>(_ type: Body.Type, from bytes: [UInt8]) throws(IngestAPIError) -> Body {
        do {
            return try IsletJSON.decodeValue(type, from: bytes)
        } catch {
            throw IngestAPIError(.badRequest, "malformedBody", field: error.path.isEmpty ? nil : error.path, reason: error.message)
        }
    }

    /// A batch holds 1 to `maxBatch` taps: none is 400 `malformedBody`, more is 413 `batchTooLarge`.
    package static func check(_ batch: TapBatch, maxBatch: Int) throws(IngestAPIError) {
        guard !batch.taps.isEmpty else { throw IngestAPIError(.badRequest, "malformedBody", field: "taps", reason: "taps must not be empty") }
        guard batch.taps.count <= maxBatch else {
            throw IngestAPIError(
                .contentTooLarge, "batchTooLarge", field: "taps", reason: "a batch holds at most \(maxBatch) taps, got \(batch.taps.count)")
        }
    }
}
