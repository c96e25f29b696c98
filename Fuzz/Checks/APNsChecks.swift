import APNsDispatcher
import Foundation
import IsletMessages

/// The properties the APNs answer fuzzer checks: the dispatcher's reading of an answer
/// (``APNsAnswer/init(status:apnsID:body:)``: the error body's JSON `reason` and, with a 410,
/// `timestamp`). The first byte picks the status (``statuses``), the rest is the body.
///
/// For every input there is an answer without a trap, and:
/// - it keeps the status and `apns-id` as they came, and a 200 has neither reason nor timestamp;
/// - as an outcome records it (``APNsAnswer/response``, in a ``PushOutcome``), consumers of
///   `islet.push-outcomes.v1` read it back as written, the timestamp at the wire's precision
///   (milliseconds).
public enum APNsChecks {
    /// The statuses APNs answers with.
    static let statuses = [200, 400, 403, 404, 405, 410, 413, 429, 500, 503]
    static let requestId = "7f1c6b1e-2d4a-4c8e-9a51-0c3f5e6d7b8a"

    /// Checks one input; traps when a property does not hold.
    public static func check(_ bytes: [UInt8]) {
        guard let first = bytes.first else { return }
        let status = statuses[Int(first) % statuses.count]
        let body = Array(bytes.dropFirst())
        let answer = APNsAnswer(status: status, apnsID: requestId, body: body)
        require(answer.status == status && answer.apnsID == requestId, "the answer \(status) \(quoted(body)) changed its status or id")
        require(status != 200 || (answer.reason == nil && answer.timestamp == nil), "a 200 has a reason or a timestamp: \(quoted(body))")

        let action = APNsAction.forAnswer(status: answer.status, reason: answer.reason)
        let outcome = PushOutcome(
            requestId: requestId, activityId: "order-42", result: action == .delivered ? .delivered : .tokenInvalid, apns: answer.response,
            priorityUsed: 10, attempts: 1, detail: "APNs: \(answer.reason ?? "")", completedAt: LinkChecks.tapped)
        var expected = outcome
        expected.apns?.timestamp = answer.timestamp.map(IsletDate.truncatedToMilliseconds)
        require(MessageChecks.rewritten(outcome) == expected, "the outcome of the answer \(status) \(quoted(body)) does not read back as written")
    }
}
