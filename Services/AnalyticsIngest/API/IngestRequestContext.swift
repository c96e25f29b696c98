import Foundation
import Hummingbird
import IsletMessages
import IsletRuntime
import Logging
import NIOCore

/// The request context of analytics-ingest: Hummingbird's, plus the TCP peer's address (the
/// default client identity for rate limiting).
public struct IngestRequestContext: RequestContext, RemoteAddressRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let remoteAddress: SocketAddress?

    public init(source: ApplicationRequestContextSource) {
        coreContext = .init(source: source)
        remoteAddress = source.channel.remoteAddress
    }
}
