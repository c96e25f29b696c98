import IsletKafka
import Synchronization
import Testing
@testable import ContentService

/// A one-shot signal a test task waits for.
private final class Signal: Sendable {
    private let stream: AsyncStream<Void>
    private let continuation: AsyncStream<Void>.Continuation
    init() { (stream, continuation) = AsyncStream.makeStream() }
    func fire() { continuation.finish() }
    func wait() async { for await _ in stream {} }
}

/// What happened, in order.
private final class Log: Sendable {
    private let entries = Mutex<[String]>([])
    func add(_ entry: String) { entries.withLock { $0.append(entry) } }
    var all: [String] { entries.withLock { $0 } }
}

/// Yields until `condition` holds (other tasks run meanwhile; no clock involved).
private func until(_ condition: () -> Bool) async {
    while !condition() { await Task.yield() }
}

@Suite("The service's turns: lanes at once, the whole turn alone", .timeLimit(.minutes(1)))
struct TurnsTests {
    @Test("lanes hold their turns at once; the whole turn waits for them, and lanes asking after it wait for it")
    func lanesAndWhole() async throws {
        let turns = ServiceTurns()
        let order = Log()
        let (releaseA, releaseB, releaseWhole) = (Signal(), Signal(), Signal())
        let a = Task { try await turns.lane { order.add("a"); await releaseA.wait() } }
        let b = Task { try await turns.lane { order.add("b"); await releaseB.wait() } }
        await until { order.all.count == 2 }

        let whole = Task { try await turns.whole { order.add("whole"); await releaseWhole.wait() } }
        await until { turns.waiting == 1 }
        let c = Task { try await turns.lane { order.add("c") } }
        await until { turns.waiting == 2 }
        #expect(order.all.sorted() == ["a", "b"], "the whole turn and the later lane wait")

        releaseA.fire()
        try await a.value
        #expect(turns.held == (1, false), "b still holds its lane")
        releaseB.fire()
        try await b.value
        await until { order.all.last == "whole" }
        #expect(turns.held == (0, true))
        releaseWhole.fire()
        try await whole.value
        try await c.value
        #expect(order.all.suffix(2) == ["whole", "c"])
        #expect(turns.held == (0, false) && turns.waiting == 0)
    }

    @Test("a turn whose body throws is given back")
    func throwing() async throws {
        struct Failure: Error {}
        let turns = ServiceTurns()
        await #expect(throws: Failure.self) { try await turns.whole { throw Failure() } }
        await #expect(throws: Failure.self) { try await turns.lane { throw Failure() } }
        #expect(try await turns.whole { 7 } == 7)
        #expect(turns.held == (0, false))
    }

    @Test("a waiter of the semaphore cancelled holds nothing, and the place goes to the next one")
    func semaphoreCancelled() async throws {
        let semaphore = AsyncSemaphore(1)
        try await semaphore.acquire()
        let cancelled = Task { try await semaphore.acquire() }
        await until { semaphore.waiting == 1 }
        let next = Task { try await semaphore.acquire() }
        await until { semaphore.waiting == 2 }
        cancelled.cancel()
        await #expect(throws: CancellationError.self) { try await cancelled.value }
        #expect(semaphore.waiting == 1)
        semaphore.release()
        try await next.value
        #expect(!semaphore.isIdle, "next holds the place")
        semaphore.release()
        #expect(semaphore.isIdle)

        // Cancelled before it waits: throws at once, takes nothing.
        let early = Task {
            withUnsafeCurrentTask { $0?.cancel() }
            try await semaphore.acquire()
        }
        // The place was free: a task cancelled first still does not take it.
        await #expect(throws: CancellationError.self) { try await early.value }
        #expect(semaphore.isIdle)
    }

    @Test("an activity's lane is the same for every event of it, and activities spread over the lanes")
    func lanes() {
        #expect(ContentLanes.lane(of: "order-42", among: 8) == ContentLanes.lane(of: "order-42", among: 8))
        // FNV-1a 64 of "a" is 0xaf63dc4c8601ec8c.
        #expect(ContentLanes.lane(of: "a", among: 1_000) == Int(UInt64(0xaf63_dc4c_8601_ec8c) % 1_000))
        var counts = [Int](repeating: 0, count: 8)
        for index in 0..<8_000 { counts[ContentLanes.lane(of: "order-\(index)", among: 8)] += 1 }
        #expect(counts.allSatisfy { (800...1_200).contains($0) }, "\(counts)")
    }
}
