/// Configuration of a ``KafkaAdmin`` client.
public struct KafkaAdminConfiguration: Sendable {
    public var bootstrapServers: String
    public var clientID: String
    /// How long one administration request may take. Default 30 s.
    public var requestTimeout: Duration
    public var settings: [String: String]

    public init(
        bootstrapServers: String, clientID: String = "islet-admin", requestTimeout: Duration = .seconds(30),
        settings: [String: String] = [:]
    ) {
        self.bootstrapServers = bootstrapServers
        self.clientID = clientID
        self.requestTimeout = requestTimeout
        self.settings = settings
    }

    /// `allow.auto.create.topics=false`: asking about a topic must not create it.
    public static let defaultSettings: [String: String] = ["allow.auto.create.topics": "false"]

    func librdkafkaProperties() throws(KafkaError) -> [String: String] {
        try mergeProperties(
            defaults: Self.defaultSettings, user: settings, enforced: [:],
            base: ["bootstrap.servers": bootstrapServers, "client.id": clientID])
    }
}
