import Foundation

/// Where a service says which ports it listens on: when `ISLET_LISTENERS_FILE` names a file, each
/// listener appends a line `name port` to it once it is bound (`http`, `operator`, `grpc`,
/// `apns`). With port 0 configured the kernel picks a free port at bind time, and whoever started
/// the service — the end-to-end suites — reads it there: no port is chosen before it is bound, so
/// none can be taken by another process meanwhile.
public enum ListenerReport {
    /// Appends `name port` to the file `ISLET_LISTENERS_FILE` names, if it names one.
    public static func bound(_ name: String, port: Int?, environment: [String: String] = ProcessInfo.processInfo.environment) {
        guard let path = environment["ISLET_LISTENERS_FILE"], !path.isEmpty, let port else { return }
        let line = "\(name) \(port)\n"
        // O_APPEND: listeners bound at once each write their whole line.
        let fd = open(path, O_WRONLY | O_CREAT | O_APPEND, 0o644)
        guard fd >= 0 else { return }
        defer { close(fd) }
        _ = line.withCString { write(fd, $0, strlen($0)) }
    }

    /// The listeners a report file names (the last port of each name wins).
    public static func read(_ path: String) -> [String: Int] {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else { return [:] }
        var ports: [String: Int] = [:]
        for line in text.split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.count == 2, let port = Int(parts[1]) { ports[String(parts[0])] = port }
        }
        return ports
    }
}
