import IsletRuntime

/// Why a request was refused as a whole (before any tap was judged): Islet's one HTTP API error
/// (``HTTPAPIError``), with the same body shape as a rejected tap's.
///
/// ```json
/// {"error": "rateLimited", "reason": "too many requests from this client: retry after 2 s"}
/// ```
public typealias IngestAPIError = HTTPAPIError
