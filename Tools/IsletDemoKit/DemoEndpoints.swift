/// Where the running product is: the demo's and the stack benchmarks' way in.
public struct DemoEndpoints: Sendable {
    public var bootstrap: String
    public var registry: String
    public var simulator: String
    public var ingest: String
    public var images: String
    /// The registry's HS256 key, `kid=secret`.
    public var jwtKey: String
    /// content-service's HTTP API and a backend key with `write`: when given, one step of the food
    /// order goes through it (as a backend without a Kafka client would), the rest through Kafka.
    public var content: String
    public var backendKey: String?
    /// The key the apps' backends sign activity tickets with, `kid=secret` (one of token-registry's
    /// `ISLET_TICKET_HS256_KEYS`): when given, each update-token registration carries the ticket its
    /// backend would hand the app with the order (needed where `ISLET_TICKETS_REQUIRED` is true).
    public var ticketKey: String?

    public init(
        bootstrap: String, registry: String = "http://127.0.0.1:8081", simulator: String = "http://127.0.0.1:8090",
        ingest: String = "http://127.0.0.1:8084", images: String = "http://127.0.0.1:8099", jwtKey: String,
        content: String = "http://127.0.0.1:8083", backendKey: String? = nil, ticketKey: String? = nil
    ) {
        self.bootstrap = bootstrap
        self.registry = registry
        self.simulator = simulator
        self.ingest = ingest
        self.images = images
        self.jwtKey = jwtKey
        self.content = content
        self.backendKey = backendKey
        self.ticketKey = ticketKey
    }
}
