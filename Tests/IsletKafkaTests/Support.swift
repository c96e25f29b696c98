import Logging

/// librdkafka logs every failed connection attempt; these tests make such attempts on purpose.
let quietLogger: Logger = {
    var logger = Logger(label: "islet.test")
    logger.logLevel = .critical
    return logger
}()
