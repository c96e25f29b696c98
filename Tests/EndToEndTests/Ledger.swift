import Foundation
import IsletKafka
import IsletMessages
import IsletTesting
import Logging

let e2eLogger = testLogger("islet.test.e2e")

/// Reads every partition of `topics` from the start to its current end and returns the records.
func readToEnd(_ topics: [String], bootstrap: String, timeout: Duration = .seconds(120)) async throws -> [KafkaMessage] {
    try await TestBroker.readToEnd(topics, bootstrapServers: bootstrap, timeout: timeout)
}

/// Every push request of a run and every outcome written for them: the invariant of the whole
/// pipeline is that each request ends in exactly one final outcome.
struct Ledger {
    var requests: [String: PushRequest] = [:]
    /// Copies of the same request id on the topic (content-service wrote it more than once).
    var requestCopies: [String: Int] = [:]
    /// Final outcomes by request id.
    var outcomes: [String: [PushOutcome]] = [:]
    /// Announcements standing (`sending`: an attempt that may reach the phone, not taken back by a
    /// `retrying` naming it), by request id: more than one is a second send.
    var announced: [String: Set<String>] = [:]
    /// Announcement records by request id (copies included).
    var announcementCount: [String: Int] = [:]

    /// The requests whose activity id starts with `prefix` (push-to-start: its source activity), and their outcomes.
    static func read(bootstrap: String, prefix: String) async throws -> Ledger {
        let messages = try await readToEnd([IsletTopics.pushRequests.name, IsletTopics.pushOutcomes.name], bootstrap: bootstrap)
        var ledger = Ledger()
        var outcomes: [PushOutcome] = []
        for message in messages {
            if message.topic == IsletTopics.pushRequests.name {
                guard let request = try? IsletJSON.decode(PushRequest.self, from: message.value ?? []),
                    (request.activityId ?? request.sourceActivityId ?? "").hasPrefix(prefix)
                else { continue }
                ledger.requests[request.requestId] = request
                ledger.requestCopies[request.requestId, default: 0] += 1
            } else if let outcome = try? IsletJSON.decode(PushOutcome.self, from: message.value ?? []) {
                outcomes.append(outcome)
            }
        }
        for outcome in outcomes where ledger.requests[outcome.requestId] != nil || (outcome.activityId ?? "").hasPrefix(prefix) {
            if outcome.result.isFinal {
                ledger.outcomes[outcome.requestId, default: []].append(outcome)
            } else {
                // A `retrying` takes back the `sending` it names (APNs did not take that attempt);
                // a copy of one (a write retried after a lost acknowledgement) is the same announcement.
                let id = outcome.announcementId ?? ""
                if outcome.result == .retrying {
                    ledger.announced[outcome.requestId]?.remove(id)
                } else {
                    ledger.announced[outcome.requestId, default: []].insert(id)
                    ledger.announcementCount[outcome.requestId, default: 0] += 1
                }
            }
        }
        return ledger
    }

    /// Requests with no outcome yet.
    var open: [PushRequest] { requests.values.filter { outcomes[$0.requestId] == nil } }

    /// What breaks the invariant: requests without an outcome, with more than one, outcomes of requests never made.
    var violations: [String] { violations(countingCopies: true) }

    /// Requests whose one outcome was written more than once, the copies identical to the field: a
    /// write whose acknowledgement was lost in a broker stall (it timed out, the broker had it) and
    /// that was written again. One outcome decided once, copied on the topic — not a second send.
    var copiedOutcomes: Int { outcomes.values.filter { list in list.count > 1 && list.allSatisfy { $0 == list[0] } }.count }

    /// ``violations``; with `countingCopies: false`, identical copies of one outcome count as one
    /// (see ``copiedOutcomes``).
    func violations(countingCopies: Bool) -> [String] {
        var problems: [String] = []
        for request in open { problems.append("request \(request.requestId) (\(request.key ?? "-") \(request.event.rawValue)) has no outcome") }
        for (id, list) in outcomes where list.count > 1 {
            if !countingCopies, list.allSatisfy({ $0 == list[0] }) { continue }
            problems.append("request \(id) has \(list.count) outcomes: \(list.map(\.result.rawValue))")
        }
        for id in outcomes.keys where requests[id] == nil { problems.append("outcome for \(id), which is no request of the run") }
        for (id, standing) in announced where standing.count > 1 {
            problems.append("request \(id) has \(standing.count) announcements standing, none taken back (sent more than once)")
        }
        return problems
    }

    /// Outcomes by result.
    var results: [PushResult: Int] {
        outcomes.values.compactMap(\.first).reduce(into: [:]) { $0[$1.result, default: 0] += 1 }
    }

    /// Reads until every request of the run has an outcome or `timeout` passes; returns the last reading.
    /// `complete`: what else must hold (e.g. every event sent has its requests), so that a pause of
    /// content-service with events still unread does not pass for the end.
    static func settle(
        bootstrap: String, prefix: String, expecting minimum: Int = 1, timeout: Duration = .seconds(180),
        until complete: (Ledger) -> Bool = { _ in true }
    ) async throws -> Ledger {
        let deadline = ContinuousClock.now + timeout
        var ledger = try await read(bootstrap: bootstrap, prefix: prefix)
        while ContinuousClock.now < deadline, ledger.requests.count < minimum || !ledger.open.isEmpty || !complete(ledger) {
            try await Task.sleep(for: .seconds(1))
            ledger = try await read(bootstrap: bootstrap, prefix: prefix)
        }
        return ledger
    }
}
