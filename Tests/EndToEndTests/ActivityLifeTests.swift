import APNsSimulator
import ContentService
import Foundation
import IsletMessages
import Testing

extension EndToEnd {
    /// An activity's life through the edges where updates used to be lost without a word.
    @Suite("End to end: an activity's life", .timeLimit(.minutes(5)))
    struct ActivityLifeTests {
        @Test("APNs answers 410 for a token, the registry invalidates it, the app registers the same token again: the next update reaches the phone; the backend's first event, 20 s before the app registers its token, is read by the app with its ticket (another user is refused) and delivered once the token comes; an order followed on iPhone and iPad reaches both, each in its language, and a 410 for the iPad ends the iPad's token alone")
        func life() async throws {
            let stack = try Stack(name: "activity-life")
            try await stack.run { driver in
                try await reinstall(stack: stack, driver: driver)
                try await lateToken(stack: stack, driver: driver)
                try await twoDevices(stack: stack, driver: driver)
                try await userStart(stack: stack, driver: driver)
            }
        }

        @Test("a stale push-to-start token (iOS 27: APNs answers 200, no activity appears): no update token within the confirmation time (3 s here), so the start is reported startUnconfirmed on the outcomes topic and in the lookup; token-registry retires the push-to-start token and tells the app to register it again; a start meanwhile reaches no phone; registered again, the next start does")
        func stalePushToStartToken() async throws {
            let stack = try Stack(
                name: "activity-stale-start",
                extra: [.content: ["ISLET_START_CONFIRMATION_SECONDS": "3", "ISLET_FRESHNESS_INTERVAL_SECONDS": "1"]])
            try await stack.run { driver in
                let (type, bundleId, app) = ("DeliveryAttributes", "com.example.food", AppTarget(bundleId: "com.example.food", environment: .production))
                let device = driver.run + "stale-phone"
                let startToken = Driver.token(device + "-start")
                try await driver.registerPushToStart(bundleId: bundleId, device: device, type: type, token: startToken)
                func start(_ order: String) -> ActivityEvent {
                    driver.event(
                        order, .start, type: type, sequence: 1, urgency: .important, fields: Self.fields, startTarget: .init(app: app, deviceId: device),
                        attributes: ["orderId": "7", "storeName": "Casa Lola"], bundleId: bundleId)
                }
                // The start APNs accepts; the phone never shows it (the app never registers a token).
                let first = start(driver.run + "stale-1")
                let (status, answer) = try await driver.post(event: ActivityEventBody(first, bundleId: bundleId), activityId: first.activityId, idempotencyKey: first.eventId)
                #expect(status == 202, "\(status) \(String(decoding: answer, as: UTF8.self))")
                _ = try await driver.received(token: startToken, through: driver.requestId(first))
                let verdict = try await driver.firstRecord(on: IsletTopics.pushOutcomes.name, as: PushOutcome.self, timeout: .seconds(30)) {
                    $0.requestId == driver.requestId(first) && $0.result == .startUnconfirmed
                }
                #expect(verdict.pushToStartKey?.contains(device) == true && verdict.tokenFingerprint == TokenFingerprint.of(token: startToken))
                // The lookup says so once the monitor noted Kafka's acknowledgement (a moment after the record).
                var state: JSONValue = .null
                let lookupDeadline = ContinuousClock.now + .seconds(10)
                repeat {
                    let (_, lookup) = try await driver.get(content: "/v1/activities/\(first.activityId)?bundleId=\(bundleId)")
                    state = (try? IsletJSON.decodeValue(JSONValue.self, from: lookup)) ?? .null
                    if state["startConfirmation"]?.stringValue == "unconfirmed" { break }
                    try await Task.sleep(for: .milliseconds(200))
                } while ContinuousClock.now < lookupDeadline
                #expect(state["startConfirmation"]?.stringValue == "unconfirmed" && state["latestRequest"]?["outcome"]?.stringValue == "startUnconfirmed", "\(state)")

                // The app's launch check: the registry says to register again.
                let jwt = try await stack.jwt(user: "user-1")
                let path = "/v1/apps/\(bundleId)/devices/\(device)/push-to-start/\(type)"
                var view: JSONValue = .null
                let deadline = ContinuousClock.now + .seconds(20)
                repeat {
                    let (_, body) = try await HTTP.request(stack.url(.registry) + path, headers: [("Authorization", "Bearer \(jwt)")])
                    view = (try? IsletJSON.decodeValue(JSONValue.self, from: body)) ?? .null
                    if view["registerAgain"] == .bool(true) { break }
                    try await Task.sleep(for: .milliseconds(200))
                } while ContinuousClock.now < deadline
                #expect(view["registerAgain"] == .bool(true) && view["state"]?.stringValue == "invalidated", "\(view)")
                #expect(view["invalidation"]?["reason"]?.stringValue == "startUnconfirmed", "\(view)")

                // A start meanwhile goes to no phone: the dispatcher's table has the token retired
                // (its replica reads the registry's record within milliseconds; given 5 s here, as no
                // endpoint shows the dispatcher's table).
                try await Task.sleep(for: .seconds(5))
                let second = start(driver.run + "stale-2")
                _ = try await driver.post(event: ActivityEventBody(second, bundleId: bundleId), activityId: second.activityId, idempotencyKey: second.eventId)
                let refused = try await driver.firstRecord(on: IsletTopics.pushOutcomes.name, as: PushOutcome.self, timeout: .seconds(30)) {
                    $0.requestId == driver.requestId(second) && $0.result.isFinal
                }
                #expect(refused.result == .tokenInvalid && refused.attempts == 0, "\(refused)")
                #expect(try await stack.received(token: startToken).allSatisfy { $0.apnsID.lowercased() != driver.requestId(second) })

                // The app registers its push-to-start token again: the next start reaches the phone.
                // A start the dispatcher handles before its replica read the registration ends
                // tokenInvalid without reaching the phone: another order then, at most three.
                try await driver.registerPushToStart(bundleId: bundleId, device: device, type: type, token: startToken)
                var reached = false
                for attempt in 3...5 where !reached {
                    let next = start(driver.run + "stale-\(attempt)")
                    _ = try await driver.post(event: ActivityEventBody(next, bundleId: bundleId), activityId: next.activityId, idempotencyKey: next.eventId)
                    let outcome = try await driver.firstRecord(on: IsletTopics.pushOutcomes.name, as: PushOutcome.self, timeout: .seconds(30)) {
                        $0.requestId == driver.requestId(next) && $0.result.isFinal
                    }
                    reached = outcome.result == .delivered
                    if reached { _ = try await driver.received(token: startToken, through: driver.requestId(next)) }
                }
                #expect(reached, "a start after the app registered its push-to-start token again reaches the phone")
            }
        }

        @Test("a delivery that failed is sent again by the freshness monitor, with its content read back from Kafka (content-service keeps no payload once Kafka has it)")
        func failedThenResent() async throws {
            let stack = try Stack(
                name: "activity-resend",
                extra: [
                    .content: ["ISLET_FRESHNESS_INTERVAL_SECONDS": "1"],
                    .dispatcher: ["ISLET_RETRY_MAX_ATTEMPTS": "2", "ISLET_RETRY_MAX_DELAY_MS": "200"],
                ])
            try await stack.run { driver in
                let order = driver.run + "resent"
                let token = Driver.token(order)
                try await driver.registerActivity(order, token: token, type: "DeliveryAttributes", bundleId: "com.example.food")
                // Both attempts of the first content fail: its outcome is `failed`, the phone shows nothing.
                try await stack.inject(.reject(500, "InternalServerError", token: token, count: 2))
                let first = driver.event(order, .start, type: "DeliveryAttributes", sequence: 1, fields: Self.fields)
                try await driver.publish(first)
                let deadline = ContinuousClock.now + .seconds(60)
                var received: [AcceptedNotification] = []
                while received.isEmpty, ContinuousClock.now < deadline {
                    try await Task.sleep(for: .milliseconds(200))
                    received = try await stack.received(token: token)
                }
                let resent = try #require(received.first, "the monitor sent the content again")
                #expect(resent.apnsID.lowercased() != driver.requestId(first), "a re-send, under its own request id")
                #expect(resent.priority == 10 && resent.event == "update")
                let state = try IsletJSON.decodeValue(JSONValue.self, from: Array(resent.payload.utf8))["aps"]?["content-state"]
                #expect(state?["status"] == "preparing" && state?["headline"] != nil, "the first content, read back: \(resent.payload)")
            }
        }

        @Test("a step scheduled for 45 s ahead (\"at 12:41 show delivered\") reaches the phone within a second of its time, although content-service was killed -9 and restarted after a changelog round wrote it; the lookup lists it until then")
        func scheduledStep() async throws {
            let stack = try Stack(name: "activity-scheduled")
            try await stack.run { driver in
                let order = driver.run + "scheduled"
                let token = Driver.token(order)
                try await driver.registerActivity(order, token: token, type: "DeliveryAttributes", bundleId: "com.example.food")
                let first = driver.event(order, .start, type: "DeliveryAttributes", sequence: 1, fields: Self.fields)
                try await driver.publish(first)
                _ = try await driver.received(token: token, through: driver.requestId(first))

                // The backend plans the arrival: sent now, to be shown in 40 s (a sequence above the updates until then).
                var step = driver.event(order, .update, type: "DeliveryAttributes", sequence: 1_000, fields: Self.fields.merging(["status": "delivered"]) { $1 })
                let at = Date().addingTimeInterval(45)
                step.at = at
                let (status, answer) = try await driver.post(event: ActivityEventBody(step, bundleId: "com.example.food"), activityId: order, idempotencyKey: "\(order)-arrival")
                #expect(status == 202, "\(String(decoding: answer, as: UTF8.self))")
                // Kept (in the changelog too) once the owner read it: the lookup lists it.
                let deadline = ContinuousClock.now + .seconds(20)
                var listed = false
                while !listed, ContinuousClock.now < deadline {
                    let (_, body) = try await driver.get(content: "/v1/activities/\(order)?bundleId=com.example.food")
                    listed = (try? IsletJSON.decodeValue(Scheduled.self, from: body))?.scheduled?.map(\.sequence) == [1_000]
                    if !listed { try await Task.sleep(for: .milliseconds(200)) }
                }
                #expect(listed, "the lookup does not list the step")
                #expect(try await stack.received(token: token).count == 1, "nothing sent before its time")

                // Once a changelog round wrote it (every 5 s), the event is processed and its offset
                // committed (every second): after the kill the step can only come back from the changelog.
                try await Task.sleep(for: .seconds(8))
                await stack[.content].kill9()
                try await stack[.content].start()
                let pushes = try await driver.received(token: token, through: driver.requestId(step), timeout: .seconds(60))
                let arrived = try #require(pushes.first { $0.apnsID.lowercased() == driver.requestId(step) })
                let late = arrived.receivedAt.timeIntervalSince(at)
                print("scheduled step: at the simulator \(late) s after its time")
                #expect(late >= -0.05 && late <= 1, "sent \(late) s after its time")
                let state = try IsletJSON.decodeValue(JSONValue.self, from: Array(arrived.payload.utf8))["aps"]?["content-state"]
                #expect(state?["status"] == "delivered")
                #expect(pushes.filter { $0.apnsID.lowercased() == driver.requestId(step) }.count == 1, "sent once")
                let (_, body) = try await driver.get(content: "/v1/activities/\(order)?bundleId=com.example.food")
                #expect(try IsletJSON.decodeValue(Scheduled.self, from: body).scheduled == nil, "still listed after it was sent")
            }
        }

        /// What the test reads of the lookup's answer.
        struct Scheduled: Decodable {
            struct Step: Decodable { var sequence: Int64 }
            var scheduled: [Step]?
        }

        static let fields: [String: JSONValue] = ["orderId": "7", "storeName": "Casa Lola", "status": "preparing"]

        /// The user deletes the app (APNs: 410), reinstalls it, and the app registers the same token again.
        func reinstall(stack: Stack, driver: Driver) async throws {
            let order = driver.run + "reinstalled"
            let token = Driver.token(order)
            try await driver.registerActivity(order, token: token, type: "DeliveryAttributes", bundleId: "com.example.food")
            let first = driver.event(order, .start, type: "DeliveryAttributes", sequence: 1, fields: Self.fields)
            try await driver.publish(first)
            _ = try await driver.received(token: token, through: driver.requestId(first))

            try await stack.inject(.reject(410, "Unregistered", token: token, count: 1, timestamp: Date()))
            let refused = driver.event(order, .update, type: "DeliveryAttributes", sequence: 2, fields: Self.fields.merging(["status": "out_for_delivery"]) { $1 })
            try await driver.publish(refused)
            #expect(try await state(of: order, stack: stack, until: "invalidated") == "invalidated", "token-registry acts on APNs's 410")

            // Reinstalled: the same token registered again, after APNs's verdict.
            try await Task.sleep(for: .seconds(1))
            try await driver.registerActivity(order, token: token, type: "DeliveryAttributes", bundleId: "com.example.food")
            #expect(try await state(of: order, stack: stack, until: "active") == "active")
            let next = driver.event(order, .update, type: "DeliveryAttributes", sequence: 3, fields: Self.fields.merging(["status": "arriving"]) { $1 })
            try await driver.publish(next)
            let received = try await driver.received(token: token, through: driver.requestId(next), timeout: .seconds(30))
            #expect(received.contains { $0.apnsID.lowercased() == driver.requestId(next) }, "the update after the reinstall reached the phone")
            #expect(!received.contains { $0.apnsID.lowercased() == driver.requestId(refused) }, "the refused one was not accepted")
        }

        /// The backend is quicker than the app: its first event comes 20 s before the token.
        func lateToken(stack: Stack, driver: Driver) async throws {
            let order = driver.run + "late-token"
            let token = Driver.token(order)
            let first = driver.event(order, .start, type: "DeliveryAttributes", sequence: 1, fields: Self.fields)
            try await driver.publish(first)

            // The app starts its Live Activity only with real data (Lyft): it asks token-registry for
            // the announced content, proving with the backend's ticket that the order is its user's.
            let ticket = try await stack.ticket(user: "user-1", activity: order, bundleId: "com.example.food")
            let (status, body) = try await driver.firstContent(order, bundleId: "com.example.food", ticket: ticket, user: "user-1", retryFor: .seconds(20))
            #expect(status == 200, "\(String(decoding: body, as: UTF8.self))")
            let content = try IsletJSON.decodeValue(JSONValue.self, from: body)
            #expect(content["contentState"]?["status"] == "preparing" && content["sequence"] == 1, "\(String(decoding: body, as: UTF8.self))")
            // Another user with the owner's ticket, or without one: refused, whatever the id.
            let (stolen, _) = try await driver.firstContent(order, bundleId: "com.example.food", ticket: ticket, user: "user-2")
            #expect(stolen == 403, "another user's ticket")
            let (forged, _) = try await driver.firstContent(order, bundleId: "com.example.food", ticket: ticket + "x", user: "user-1")
            #expect(forged == 403, "a ticket that does not verify")

            try await Task.sleep(for: .seconds(20))
            #expect(try await stack.received(token: token, payloads: false).isEmpty)
            try await driver.registerActivity(order, token: token, type: "DeliveryAttributes", bundleId: "com.example.food")
            let received = try await driver.received(token: token, through: driver.requestId(first), timeout: .seconds(30))
            #expect(received.count == 1, "the first content, once the token arrived")
        }

        /// An order on two devices of one user (issue 60 item 4): each device registers its own
        /// token for the activity; every update reaches both; APNs's 410 for one ends that one only.
        func twoDevices(stack: Stack, driver: Driver) async throws {
            let order = driver.run + "two-devices"
            let (phone, pad) = (Driver.token(order + "-phone"), Driver.token(order + "-ipad"))
            try await driver.registerActivity(order, token: phone, type: "DeliveryAttributes", bundleId: "com.example.food", deviceId: "phone")
            try await driver.registerActivity(
                order, token: pad, type: "DeliveryAttributes", bundleId: "com.example.food", deviceId: "ipad", locale: "zh-Hans-CN")
            let lookup = try await view(of: order, stack: stack)
            #expect(lookup?["deviceId"]?.stringValue == "phone" && Self.firstDevice(lookup)?["deviceId"]?.stringValue == "ipad", "\(String(describing: lookup))")

            let first = driver.event(order, .start, type: "DeliveryAttributes", sequence: 1, fields: Self.fields)
            try await driver.publish(first)
            let id = driver.requestId(first)
            let onPhone = try await driver.received(token: phone, through: id)
            // The iPad's copy of the event — or, when content-service read the iPad's registration
            // only after the event (its table lags the topic), the same content from the
            // freshness monitor's next pass.
            let (copyId, catchUpId) = (RequestIds.copy(of: id, deviceId: "ipad"), RequestIds.catchUp(of: id, deviceId: "ipad"))
            let padDeadline = ContinuousClock.now + .seconds(60)
            var onPad: [AcceptedNotification] = []
            while onPad.isEmpty, ContinuousClock.now < padDeadline {
                onPad = try await stack.received(token: pad)
                if onPad.isEmpty { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(onPhone.count == 1 && onPad.count == 1, "one push each")
            let padId = try #require(onPad.first?.apnsID.lowercased(), "the iPad got the first content")
            #expect(padId == copyId || padId == catchUpId, "\(padId)")
            let statusOf = { (push: AcceptedNotification) in
                try IsletJSON.decodeValue(JSONValue.self, from: Array(push.payload.utf8))["aps"]?["content-state"]?["headline"]?.stringValue ?? ""
            }
            let (english, chinese) = (try statusOf(onPhone[0]), try statusOf(onPad[0]))
            if padId == copyId {
                #expect(english != chinese && chinese.unicodeScalars.contains { $0.value > 0x2E80 }, "each in its own language: \(english) / \(chinese)")
            } else {
                print("two devices: the iPad's registration was read after the first event: it got the content from the monitor's next pass")
                #expect(english == chinese, "the first device's content, as re-sent")
            }

            // The iPad's app was deleted: APNs answers 410 for its token, and only for it.
            try await stack.inject(.reject(410, "Unregistered", token: pad, count: 1, timestamp: Date()))
            let second = driver.event(order, .update, type: "DeliveryAttributes", sequence: 2, fields: Self.fields.merging(["status": "out_for_delivery"]) { $1 })
            try await driver.publish(second)
            _ = try await driver.received(token: phone, through: driver.requestId(second))
            let deadline = ContinuousClock.now + .seconds(20)
            var padState: String?
            while padState != "invalidated", ContinuousClock.now < deadline {
                padState = Self.firstDevice(try await view(of: order, stack: stack))?["state"]?.stringValue
                if padState != "invalidated" { try await Task.sleep(for: .milliseconds(200)) }
            }
            #expect(padState == "invalidated", "token-registry ends the iPad's token on its 410")
            #expect(try await view(of: order, stack: stack)?["state"]?.stringValue == "active", "the phone's token stays")
            let third = driver.event(order, .update, type: "DeliveryAttributes", sequence: 3, fields: Self.fields.merging(["status": "arriving"]) { $1 })
            try await driver.publish(third)
            let phoneAfter = try await driver.received(token: phone, through: driver.requestId(third))
            #expect(phoneAfter.count == 3, "every update reached the phone")
            #expect(try await stack.received(token: pad).count == 1, "nothing reached the iPad after its 410")
        }

        /// A start to every device of a user (issue 60 item 4): the backend names the user, and each
        /// of their devices with a push-to-start token gets its own start, in its language; another
        /// user's device gets none. Both devices then register the activity's update token, and the
        /// next update reaches both.
        func userStart(stack: Stack, driver: Driver) async throws {
            let (type, bundleId, app) = ("DeliveryAttributes", "com.example.food", AppTarget(bundleId: "com.example.food", environment: .production))
            let base = driver.run + "user-start"
            let (phone, pad, other) = (base + "-phone", base + "-ipad", base + "-other")
            let (phoneStart, padStart, otherStart) = (Driver.token(phone + "-start"), Driver.token(pad + "-start"), Driver.token(other + "-start"))
            try await driver.registerPushToStart(bundleId: bundleId, device: phone, type: type, token: phoneStart)
            try await driver.registerPushToStart(bundleId: bundleId, device: pad, type: type, token: padStart, locale: "zh-Hans-CN")
            try await driver.registerPushToStart(bundleId: bundleId, device: other, type: type, token: otherStart, user: "user-2")
            // content-service reads the registrations from Kafka: a start made before it read the
            // iPad's goes to the phone alone (docs/token-registry.md). Another order then, at most three.
            var started: (order: String, id: String)?
            for attempt in 1...3 where started == nil {
                let order = base + "-\(attempt)"
                let start = driver.event(
                    order, .start, type: type, sequence: 1, urgency: .important, fields: Self.fields, startTarget: .init(app: app, userId: "user-1"),
                    attributes: ["orderId": "7", "storeName": "Casa Lola"], bundleId: bundleId)
                let (status, answer) = try await driver.post(event: ActivityEventBody(start, bundleId: bundleId), activityId: order, idempotencyKey: start.eventId)
                if status == 400, attempt < 3 {
                    try await Task.sleep(for: .seconds(1))
                    continue
                }
                #expect(status == 202, "\(status) \(String(decoding: answer, as: UTF8.self))")
                // Each device's start has its own id, derived from the event's.
                let id = RequestIds.copy(of: driver.requestId(start), deviceId: phone)
                _ = try await driver.received(token: phoneStart, through: id)
                let copyId = RequestIds.copy(of: driver.requestId(start), deviceId: pad)
                let deadline = ContinuousClock.now + .seconds(10)
                while ContinuousClock.now < deadline, !(try await stack.received(token: padStart)).contains(where: { $0.apnsID.lowercased() == copyId }) {
                    try await Task.sleep(for: .milliseconds(100))
                }
                if try await stack.received(token: padStart).contains(where: { $0.apnsID.lowercased() == copyId }) {
                    started = (order, driver.requestId(start))
                } else {
                    print("user start: content-service had not read the iPad's push-to-start registration; another order")
                }
            }
            let (order, id) = try #require(started, "the start reached both devices of the user")
            let onPhone = try await stack.received(token: phoneStart).filter { $0.apnsID.lowercased() == RequestIds.copy(of: id, deviceId: phone) }
            let onPad = try await stack.received(token: padStart).filter { $0.apnsID.lowercased() == RequestIds.copy(of: id, deviceId: pad) }
            #expect(onPhone.count == 1 && onPad.count == 1, "one start each")
            #expect(
                onPhone.first?.payload.contains("Preparing your order") == true && onPad.first?.payload.contains("正在为您备货") == true,
                "each in its language: \(onPhone.first?.payload ?? "") / \(onPad.first?.payload ?? "")")
            #expect(try await stack.received(token: otherStart).isEmpty, "another user's device gets nothing")

            // iOS started it on both: each app registers the activity's update token with its device.
            let (phoneToken, padToken) = (Driver.token(order + "-phone-update"), Driver.token(order + "-ipad-update"))
            try await driver.registerActivity(order, token: phoneToken, type: type, bundleId: bundleId, deviceId: phone)
            try await driver.registerActivity(order, token: padToken, type: type, bundleId: bundleId, deviceId: pad, locale: "zh-Hans-CN")
            let update = driver.event(
                order, .update, type: type, sequence: 2, fields: Self.fields.merging(["status": "out_for_delivery"]) { $1 }, bundleId: bundleId)
            try await driver.publish(update)
            _ = try await driver.received(token: phoneToken, through: driver.requestId(update))
            let padDeadline = ContinuousClock.now + .seconds(60)
            var padPushes: [AcceptedNotification] = []
            while padPushes.isEmpty, ContinuousClock.now < padDeadline {
                padPushes = try await stack.received(token: padToken)
                if padPushes.isEmpty { try await Task.sleep(for: .milliseconds(100)) }
            }
            #expect(padPushes.count == 1, "the update (or the monitor's catch-up of it) reached the iPad")
        }

        static func firstDevice(_ view: JSONValue?) -> JSONValue? {
            guard case .array(let devices)? = view?["devices"] else { return nil }
            return devices.first
        }

        /// The app's view of its activity (`GET /v1/activities/{id}`), when it is 200.
        func view(of activity: String, stack: Stack) async throws -> JSONValue? {
            let jwt = try await stack.jwt(user: "user-1")
            let (status, body) = try await HTTP.request(
                stack.url(.registry) + "/v1/activities/\(activity)?bundleId=com.example.food", headers: [("Authorization", "Bearer \(jwt)")])
            return status == 200 ? try? IsletJSON.decodeValue(JSONValue.self, from: body) : nil
        }

        /// The app's view of its activity's token state, asked every 200 ms until it is `expected` (at most 20 s).
        func state(of activity: String, stack: Stack, until expected: String) async throws -> String? {
            let jwt = try await stack.jwt(user: "user-1")
            let deadline = ContinuousClock.now + .seconds(20)
            var state: String?
            while ContinuousClock.now < deadline {
                let (status, body) = try await HTTP.request(
                    stack.url(.registry) + "/v1/activities/\(activity)?bundleId=com.example.food", headers: [("Authorization", "Bearer \(jwt)")])
                if status == 200, case .object(let view)? = try? IsletJSON.decodeValue(JSONValue.self, from: body) { state = view["state"]?.stringValue }
                if state == expected { return state }
                try await Task.sleep(for: .milliseconds(200))
            }
            return state
        }
    }
}
