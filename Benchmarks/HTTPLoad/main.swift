// islet-http-load: an open-loop ("wrk2-style") HTTP/1.1 load generator, for finding the highest
// request rate a service sustains within a latency budget (a script runs it at several rates).
//
// Closed loop vs open loop. A closed-loop generator (wrk, ab, N clients that each wait for an answer
// before sending the next request) slows down together with the server: if the server stalls for
// 200 ms, the clients stop sending for 200 ms, the requests real users would have sent meanwhile are
// never sent nor measured, and the percentiles look fine ("coordinated omission"). Real users do not
// wait for each other; they arrive at a rate. Here request i has an intended send time t0 + i/rate,
// fixed in advance; it is sent when that time comes whether earlier answers have arrived or not
// (keep-alive connections, pipelined), and its latency is measured from that INTENDED time to the
// arrival of its complete answer. So every request that had to queue behind a stall or a backlog
// carries that wait in its latency. If the generator itself falls behind, `lateSends` says so.
//
//   islet-http-load --url http://127.0.0.1:8080 --path /v1/taps --rate 5000 --duration 10 \
//       [--connections 64] [--lines FILE] [--body TEMPLATE] [--header 'Name: value' ...] [--warmup 0] [--timeout 10]
//
// Prints one line of JSON on stdout (see Load.report); messages go to stderr.
import ArgumentParser
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

@main
struct HTTPLoad: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "islet-http-load", abstract: "Open-loop HTTP/1.1 load at a constant rate; prints one line of JSON.")
    @Option(help: "The service: http://host:port") var url: String
    @Option(help: "Request path (and query); default: the URL's path, or /.") var path: String?
    @Option(help: "Requests per second, in total.") var rate: Double
    @Option(help: "Seconds of measured sending.") var duration: Double
    @Option(help: "Keep-alive connections, opened before the clock starts.") var connections: Int = 64
    @Option(help: "A file whose lines replace {line} in the body, in turn.") var lines: String?
    @Option(help: "POST body (application/json); {line}, {now} (UTC, ISO 8601 with ms) and {n} (request index) are replaced. Without it: GET.")
    var body: String?
    @Option(name: .customLong("header"), help: "'Name: value' added to every request (repeatable).") var headers: [String] = []
    @Option(help: "Seconds of sending at the same rate before the measured window.") var warmup: Double = 0
    @Option(help: "Seconds to wait for outstanding answers after the last send.") var timeout: Double = 10

    func validate() throws {
        guard rate > 0, duration > 0, warmup >= 0, timeout >= 0 else { throw ValidationError("--rate and --duration must be > 0, --warmup and --timeout >= 0") }
        guard connections >= 1 else { throw ValidationError("--connections must be >= 1") }
        guard let u = URL(string: url), u.scheme == "http", u.host != nil else { throw ValidationError("--url must look like http://host:port") }
        guard headers.allSatisfy({ $0.contains(":") }) else { throw ValidationError("--header must look like 'Name: value'") }
        if body?.contains("{line}") == true && lines == nil { throw ValidationError("{line} in --body needs --lines FILE") }
    }

    func run() async throws {
        let u = URL(string: url)!
        let host = u.host!, port = u.port ?? 80
        // The request every send starts from: method, path, Host, Content-Type, the user's headers.
        let uri = path ?? (u.path.isEmpty ? "/" : u.path)
        var head = HTTPRequestHead(version: .http1_1, method: body == nil ? .GET : .POST, uri: uri)
        for header in headers {
            let colon = header.firstIndex(of: ":")!
            head.headers.add(name: String(header[..<colon]).trimmingCharacters(in: .whitespaces),
                             value: String(header[header.index(after: colon)...]).trimmingCharacters(in: .whitespaces))
        }
        if !head.headers.contains(name: "Host") { head.headers.add(name: "Host", value: port == 80 ? host : "\(host):\(port)") }
        if body == nil { head.headers.add(name: "Content-Length", value: "0") }
        else if !head.headers.contains(name: "Content-Type") { head.headers.add(name: "Content-Type", value: "application/json") }
        var lineBytes: [[UInt8]] = []
        if let lines {
            guard let text = try? String(contentsOfFile: lines, encoding: .utf8) else { throw ValidationError("cannot read --lines \(lines)") }
            lineBytes = text.split(whereSeparator: \.isNewline).map { Array($0.utf8) }
            if lineBytes.isEmpty { throw ValidationError("--lines \(lines) has no lines") }
        }

        // One event loop thread: the generator's CPU stays small and measurable, and all the state
        // below is touched only on that thread.
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        let loop = group.next()
        let load = Load(loop: loop, rate: rate, warmup: warmup, duration: duration, timeout: timeout,
                        request: RequestMaker(head: head, template: body.map(Template.init), lines: lineBytes))
        let conns = (0..<connections).map { Connection(id: $0, load: load) }
        load.connections = conns
        do {
            let bootstrap = ClientBootstrap(group: loop).connectTimeout(.seconds(5))
            let opened = conns.map { conn in
                bootstrap.channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHTTPClientHandlers()  // HTTPRequestEncoder + HTTPResponseDecoder
                        try channel.pipeline.syncOperations.addHandler(conn)
                    }
                }.connect(host: host, port: port)
            }
            for channel in opened { _ = try await channel.get() }
        } catch {
            note("cannot open \(connections) connections to \(host):\(port): \(error)")
            try? await group.shutdownGracefully()
            throw ExitCode.failure
        }
        try await loop.flatSubmit { load.start() }.get()
        let report = try await loop.submit { load.report() }.get()
        print(report)
        try await group.shutdownGracefully()
    }
}

func note(_ message: String) { FileHandle.standardError.write(Data("islet-http-load: \(message)\n".utf8)) }

/// The run: the schedule, the sending, the figures. Touched only on its event loop.
final class Load: @unchecked Sendable {
    let loop: any EventLoop
    let rate: Double, seconds: Double
    let nanosPerRequest: Double
    let warmupCount: Int, total: Int  // requests [0, warmupCount) warm up; [warmupCount, total) are measured
    let timeout: TimeAmount
    var request: RequestMaker
    var connections: [Connection] = []
    let done: EventLoopPromise<Void>

    var t0 = NIODeadline.now(), windowStart = NIODeadline.now(), windowEnd = NIODeadline.now()
    var next = 0, robin = 0, outstanding = 0
    var ticker: Scheduled<Void>?  // the next tick
    /// Sending wakes up at most once a millisecond: each wake-up costs CPU the service could have
    /// used, and sends wait at most this long (≤ 1 ms added to latencies at rates above 1000/s).
    static let minimumSleep = TimeAmount.milliseconds(1)
    var finished = false
    var cpuStart = 0.0, cpuEnd: Double?
    var sent = 0, completed = 0, ok = 0, non2xx = 0, errors = 0, timeouts = 0, lateSends = 0
    var completedInWindow = 0  // answers (any request's) that arrived inside the measured window
    var latencies: [UInt32] = []  // microseconds, measured requests only

    init(loop: any EventLoop, rate: Double, warmup: Double, duration: Double, timeout: Double, request: RequestMaker) {
        self.loop = loop
        self.rate = rate
        self.seconds = duration
        self.nanosPerRequest = 1e9 / rate
        self.warmupCount = Int((warmup * rate).rounded())
        self.total = warmupCount + Int((duration * rate).rounded())
        self.timeout = .nanoseconds(Int64(timeout * 1e9))
        self.request = request
        self.done = loop.makePromise()
        latencies.reserveCapacity(total - warmupCount)
    }

    func intended(_ index: Int) -> NIODeadline { t0 + .nanoseconds(Int64(Double(index) * nanosPerRequest)) }

    /// Starts the clock; the future completes when every answer is in, or at the timeout.
    func start() -> EventLoopFuture<Void> {
        t0 = .now()
        windowStart = intended(warmupCount)
        windowEnd = intended(total)
        loop.scheduleTask(deadline: windowStart) { self.cpuStart = cpuSeconds() }
        loop.scheduleTask(deadline: windowEnd) { if self.cpuEnd == nil { self.cpuEnd = cpuSeconds() } }
        tick()
        return done.futureResult
    }

    /// Sends each request whose intended time has come, round-robin over the live connections,
    /// written without waiting for earlier answers, one flush per connection; then sleeps until the
    /// next intended time, but at least `minimumSleep` (at high rates one wake-up sends a batch).
    func tick() {
        guard !finished else { return }
        let now = NIODeadline.now()
        while next < total, intended(next) <= now {
            guard let conn = nextConnection() else {  // the measured requests that cannot be sent are errors too
                note("every connection is lost; stopping with \(total - next) requests unsent")
                errors += total - max(next, warmupCount)
                return finish()
            }
            if next >= warmupCount {
                sent += 1
                if now - intended(next) > .milliseconds(10) { lateSends += 1 }
            }
            let (head, body) = request.make(next, allocator: conn.allocator)
            conn.send(next, head: head, body: body)
            outstanding += 1
            next += 1
        }
        for conn in connections where conn.unflushed { conn.flush() }
        if next < total {
            ticker = loop.scheduleTask(deadline: max(intended(next), now + Load.minimumSleep)) { self.tick() }
        } else {  // all sent: wait for the answers
            ticker = nil
            loop.scheduleTask(in: timeout) { self.finish() }
            if outstanding == 0 { finish() }
        }
    }

    func nextConnection() -> Connection? {
        for _ in 0..<connections.count {
            let conn = connections[robin]
            robin = (robin + 1) % connections.count
            if conn.isOpen { return conn }
        }
        return nil
    }

    /// A complete answer (head through end) to request `index` arrived.
    func answered(_ index: Int, status: UInt) {
        guard !finished else { return }  // already counted as a timeout
        let now = NIODeadline.now()
        outstanding -= 1
        if now >= windowStart && now < windowEnd { completedInWindow += 1 }
        if index >= warmupCount {
            completed += 1
            if (200..<300).contains(status) { ok += 1 } else { non2xx += 1 }
            let micros = max(0, (now - intended(index)).nanoseconds / 1000)
            latencies.append(UInt32(clamping: micros))
        }
        if next == total && outstanding == 0 { finish() }
    }

    /// A connection closed or failed: its outstanding requests are errors (no reconnecting).
    func lost(_ conn: Connection, pending: [Int]) {
        guard !finished else { return }
        note("connection \(conn.id) closed with \(pending.count) requests outstanding")
        outstanding -= pending.count
        errors += pending.count { $0 >= warmupCount }
        if next == total && outstanding == 0 { finish() }
    }

    /// The end: what is still unanswered has timed out; connections are closed.
    func finish() {
        guard !finished else { return }
        finished = true
        ticker?.cancel()
        if cpuEnd == nil { cpuEnd = cpuSeconds() }
        for conn in connections {
            timeouts += conn.pending.remaining.count { $0 >= warmupCount }
            conn.close()
        }
        done.succeed()
    }

    /// The JSON line. Counts are of measured requests: sent = written; completed = answered (ok: 2xx,
    /// non2xx: other statuses); errors = outstanding on a connection that closed or failed, plus
    /// those left unsent when every connection was lost; timeouts = unanswered at the end. So
    /// completed + errors + timeouts = rate × seconds. achievedPerSecond counts the answers (to any
    /// request) that arrived inside the measured window; cpuSeconds covers that window too.
    func report() -> String {
        latencies.sort()
        func percentile(_ p: Double) -> Double {  // nearest rank, in ms
            latencies.isEmpty ? 0 : Double(latencies[max(0, Int((p * Double(latencies.count)).rounded(.up)) - 1)]) / 1000
        }
        let rateText = rate == rate.rounded() ? String(Int(rate)) : String(rate)
        let achieved = (Double(completedInWindow) / seconds * 10).rounded() / 10
        let cpu = (((cpuEnd ?? cpuSeconds()) - cpuStart) * 1000).rounded() / 1000
        return #"{"rate":\#(rateText),"seconds":\#(seconds),"sent":\#(sent),"completed":\#(completed),"ok":\#(ok),"#
            + #""non2xx":\#(non2xx),"errors":\#(errors),"timeouts":\#(timeouts),"achievedPerSecond":\#(achieved),"#
            + #""p50ms":\#(percentile(0.5)),"p90ms":\#(percentile(0.9)),"p99ms":\#(percentile(0.99)),"#
            + #""maxms":\#(percentile(1)),"lateSends":\#(lateSends),"cpuSeconds":\#(cpu)}"#
    }
}

/// The process's user + system CPU seconds so far.
func cpuSeconds() -> Double {
    var usage = rusage()
    #if os(Linux)
    getrusage(__rusage_who_t(RUSAGE_SELF.rawValue), &usage)
    #else
    getrusage(RUSAGE_SELF, &usage)
    #endif
    return Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
}

/// One keep-alive connection. HTTP/1.1 answers come back in request order, so a FIFO of the
/// indices sent and not yet answered tells which request each answer belongs to.
final class Connection: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart
    let id: Int
    unowned let load: Load
    var context: ChannelHandlerContext?
    var pending = FIFO()
    var status: UInt = 0
    var unflushed = false
    var isOpen: Bool { context != nil }
    var allocator: ByteBufferAllocator { context?.channel.allocator ?? ByteBufferAllocator() }

    init(id: Int, load: Load) { self.id = id; self.load = load }

    func handlerAdded(context: ChannelHandlerContext) { self.context = context }

    func send(_ index: Int, head: HTTPRequestHead, body: ByteBuffer?) {
        guard let context else { return }
        pending.append(index)
        context.write(wrapOutboundOut(.head(head)), promise: nil)
        if let body { context.write(wrapOutboundOut(.body(.byteBuffer(body))), promise: nil) }
        context.write(wrapOutboundOut(.end(nil)), promise: nil)
        unflushed = true
    }

    func flush() { unflushed = false; context?.flush() }
    func close() { context?.close(promise: nil) }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head): status = head.status.code
        case .body: break
        case .end: if let index = pending.popFirst() { load.answered(index, status: status) }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        note("connection \(id): \(error)")
        context.close(promise: nil)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.context = nil
        let lost = Array(pending.remaining)
        pending = FIFO()
        load.lost(self, pending: lost)
    }
}

/// A queue of Ints: an array read from `head`, compacted now and then.
struct FIFO {
    private var items: [Int] = []
    private var head = 0
    var remaining: ArraySlice<Int> { items[head...] }
    mutating func append(_ item: Int) { items.append(item) }
    mutating func popFirst() -> Int? {
        guard head < items.count else { return nil }
        defer {
            head += 1
            if head >= 1024 && head * 2 >= items.count { items.removeFirst(head); head = 0 }
        }
        return items[head]
    }
}

/// The body template, split once into literal bytes and placeholders.
struct Template {
    enum Part { case text([UInt8]), line, now, index }
    var parts: [Part] = []

    init(_ template: String) {
        let bytes = Array(template.utf8)
        let names: [(String, Part)] = [("{line}", .line), ("{now}", .now), ("{n}", .index)]
        var text: [UInt8] = [], i = 0
        scan: while i < bytes.count {
            for (name, part) in names where bytes[i...].starts(with: name.utf8) {
                if !text.isEmpty { parts.append(.text(text)); text = [] }
                parts.append(part)
                i += name.utf8.count
                continue scan
            }
            text.append(bytes[i])
            i += 1
        }
        if !text.isEmpty { parts.append(.text(text)) }
    }
}

/// Builds request `n`: the fixed head (plus Content-Length) and, for POST, the filled-in body.
struct RequestMaker {
    let head: HTTPRequestHead
    let template: Template?
    let lines: [[UInt8]]
    private var second = -1  // the wall-clock second `secondText` spells, "2026-11-29T09:30:01."
    private var secondText: [UInt8] = []

    init(head: HTTPRequestHead, template: Template?, lines: [[UInt8]]) {
        self.head = head; self.template = template; self.lines = lines
    }

    mutating func make(_ n: Int, allocator: ByteBufferAllocator) -> (HTTPRequestHead, ByteBuffer?) {
        guard let template else { return (head, nil) }
        var body = allocator.buffer(capacity: 256)
        for part in template.parts {
            switch part {
            case .text(let bytes): body.writeBytes(bytes)
            case .line: body.writeBytes(lines[n % lines.count])
            case .index: body.writeString(String(n))
            case .now: writeNow(into: &body)
            }
        }
        var head = head
        head.headers.add(name: "Content-Length", value: String(body.readableBytes))
        return (head, body)
    }

    /// The current UTC time, ISO 8601 with milliseconds; the date and time are formatted once a second.
    private mutating func writeNow(into buffer: inout ByteBuffer) {
        var now = timespec()
        clock_gettime(CLOCK_REALTIME, &now)
        if now.tv_sec != second {
            second = now.tv_sec
            var t = now.tv_sec, utc = tm()
            gmtime_r(&t, &utc)
            secondText = Array(String(format: "%04d-%02d-%02dT%02d:%02d:%02d.", utc.tm_year + 1900, utc.tm_mon + 1,
                                      utc.tm_mday, utc.tm_hour, utc.tm_min, utc.tm_sec).utf8)
        }
        let ms = now.tv_nsec / 1_000_000
        buffer.writeBytes(secondText)
        buffer.writeBytes([UInt8(48 + ms / 100), UInt8(48 + ms / 10 % 10), UInt8(48 + ms % 10), UInt8(ascii: "Z")])
    }
}
