/// The cluster refused the client's login (librdkafka's `RD_KAFKA_RESP_ERR__AUTHENTICATION`: a wrong
/// SASL user or password, a mechanism the listener does not offer). librdkafka keeps trying; the
/// health says why it gets nowhere.
struct LoginRefused: Sendable, Equatable {
    /// When (``MonotonicTime``).
    var at: UInt64
    var reason: String
}
