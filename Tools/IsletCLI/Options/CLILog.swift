import Logging

enum CLILog {
    /// A logger to standard error, without bootstrapping the global logging system (tests run
    /// commands in-process).
    static func logger(verbose: Bool) -> Logger {
        var logger = Logger(label: "islet.cli") { StreamLogHandler.standardError(label: $0) }
        logger.logLevel = verbose ? .debug : .error
        return logger
    }
}
