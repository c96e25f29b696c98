import Hummingbird
import IsletMessages
import NIOCore

/// Bodies of Islet's public HTTP APIs: JSON by Islet's conventions (``IsletJSON``) in and out, and
/// an ``HTTPAPIError`` naming the field at fault when a body cannot be read.
public enum HTTPJSON {
    /// Reads a JSON body of at most `maxBodyBytes` and decodes it: 415 when it is not
    /// `application/json`, 413 when it is larger, 400 `malformedBody` naming the field at fault.
    public static func decode<Body: Decodable>(_ type: Body.Type, from request: Request, maxBodyBytes: Int) async throws(HTTPAPIError) -> Body {
        try decodeBody(type, from: try await body(of: request, maxBodyBytes: maxBodyBytes))
    }

    /// The bytes of a JSON body of at most `maxBodyBytes` (415 when it is not `application/json`, 413 when larger).
    public static func body(of request: Request, maxBodyBytes: Int) async throws(HTTPAPIError) -> [UInt8] {
        guard let contentType = request.headers[.contentType], contentType.lowercased().hasPrefix("application/json") else {
            throw HTTPAPIError(.unsupportedMediaType, .unsupportedMediaType, reason: "the body must be application/json")
        }
        if let length = request.headers[.contentLength].flatMap(Int.init), length > maxBodyBytes {
            throw HTTPAPIError.bodyTooLarge(maxBodyBytes)
        }
        do {
            return Array(try await request.body.collect(upTo: maxBodyBytes).readableBytesView)
        } catch {
            throw HTTPAPIError.bodyTooLarge(maxBodyBytes)
        }
    }

    /// A body's bytes as `Body`, by Islet's JSON conventions; otherwise 400 `malformedBody` naming
    /// the field at fault. What every route does with the bytes it read (the body fuzzers call it too).
    public static func decodeBody<Body: Decodable>(_ type: Body.Type, from bytes: [UInt8]) throws(HTTPAPIError) -> Body {
        do {
            return try IsletJSON.decodeValue(type, from: bytes)
        } catch {
            throw HTTPAPIError(.badRequest, .malformedBody, field: error.path.isEmpty ? nil : error.path, reason: error.message)
        }
    }

    /// A JSON response by Islet's conventions (camelCase, ISO 8601 dates, sorted keys).
    public static func response<Value: Encodable>(_ value: Value, status: HTTPResponse.Status = .ok, headers: HTTPFields = [:]) throws -> Response {
        var fields = headers
        fields[.contentType] = "application/json"
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: try IsletJSON.encode(value))))
    }
}
