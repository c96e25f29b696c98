import APNsSimulator
import ContentService
import Foundation
import IsletMessages
import Testing
import TokenRegistry

extension EndToEnd {
    /// Issue 61 item 1: the order's events refresh the user's home-screen order widget (iOS 26).
    @Suite("End to end: widget pushes", .timeLimit(.minutes(5)))
    struct WidgetPushEndToEndTests {
        @Test("an order's state changes and its end reach the user's widget token as WidgetKit pushes (push type widgets, the widgets topic, priority 5, content-changed), updates within a state do not; another user's widget gets nothing; APNs's 410 for the widget token invalidates it in token-registry and the next change sends it nothing")
        func orderRefreshesWidget() async throws {
            let stack = try Stack(name: "widget-pushes")
            try await stack.run { driver in
                let (type, bundleId, kind) = ("DeliveryAttributes", "com.example.food", "OrderStatusWidget")
                let activity = "\(driver.run)widget-order"
                let (user, device) = ("\(driver.run)widget-user", "\(driver.run)widget-phone")
                let (token, widgetToken, strangerWidget) = (Driver.token(activity + "-token"), Driver.token(activity + "-widget"), Driver.token(activity + "-stranger"))
                let widgetPath = "/v1/apps/\(bundleId)/devices/\(device)/widgets/\(kind)"
                let widget = RegisterWidgetTokenRequest(token: widgetToken, environment: .production, appVersion: "3.0")
                #expect(try await driver.put(widgetPath, try IsletJSON.encode(widget), user: user, retryFor: .seconds(90)) == 201)
                let stranger = RegisterWidgetTokenRequest(token: strangerWidget, environment: .production, appVersion: "3.0")
                try await driver.put(
                    "/v1/apps/\(bundleId)/devices/\(driver.run)stranger-phone/widgets/\(kind)", try IsletJSON.encode(stranger), user: "\(driver.run)stranger",
                    retryFor: .seconds(90))
                try await driver.registerActivity(activity, token: token, type: type, bundleId: bundleId, deviceId: device, user: user)

                // The first event's state is one the template does not list: content-service may
                // read it before the activity's token (its replica lags), and then it does not
                // know whose widgets to refresh (docs/templates.md). The next waits until
                // content-service's lookup shows the token.
                let steps: [(ActivityEventKind, [String: JSONValue], refreshes: Bool)] = [
                    (.start, ["orderId": "42", "status": "preparing"], false),
                    (.update, ["orderId": "42", "status": "courier_assigned", "courier": ["name": "Ana"]], true),
                    (.update, ["orderId": "42", "status": "courier_assigned", "courier": ["name": "Ana"], "progress": 40], false),
                ]
                var expected: [String] = []
                for (index, (kind, fields, refreshes)) in steps.enumerated() {
                    let event = driver.event(activity, kind, type: type, sequence: Int64(index + 1), fields: fields)
                    try await driver.publish(event)
                    let id = driver.requestId(event)
                    _ = try await driver.received(token: token, through: id)
                    if index == 0 {
                        let deadline = ContinuousClock.now + .seconds(30)
                        while ContinuousClock.now < deadline {
                            let (status, body) = try await driver.get(content: "/v1/activities/\(activity)?bundleId=\(bundleId)")
                            if status == 200, (try? IsletJSON.decodeValue(JSONValue.self, from: body))?["token"]?.stringValue == "active" { break }
                            try await Task.sleep(for: .milliseconds(50))
                        }
                    }
                    if refreshes {
                        let widgetId = RequestIds.widget(of: id, deviceId: device)
                        expected.append(widgetId.lowercased())
                        _ = try await driver.received(token: widgetToken, through: widgetId)
                    }
                }
                let pushes = try await stack.received(token: widgetToken)
                #expect(pushes.map { $0.apnsID.lowercased() } == expected, "one push per state change the template lists, none within a state")
                for push in pushes {
                    #expect(push.pushType == "widgets" && push.topic == "\(bundleId).push-type.widgets" && push.priority == 5)
                    #expect(push.payload == #"{"aps":{"content-changed":true}}"# && push.event == AcceptedNotification.widgetEvent)
                    #expect((push.expiration ?? 0) > Int64(Date().timeIntervalSince1970), "kept by APNs for a phone offline a while")
                }
                #expect(try await stack.received(token: strangerWidget).isEmpty, "another user's widget hears nothing of this order")

                // The user removed the widget app-side, and APNs says so: 410 for the widget token.
                try await stack.inject(Fault(kind: .reject, token: widgetToken, status: 410, reason: "Unregistered"))
                let out = driver.event(activity, .update, type: type, sequence: 5, fields: ["orderId": "42", "status": "out_for_delivery", "courier": ["name": "Ana"]])
                try await driver.publish(out)
                _ = try await driver.received(token: token, through: driver.requestId(out))
                let jwt = try await stack.jwt(user: user)
                let deadline = ContinuousClock.now + .seconds(60)
                var invalidated = false
                while !invalidated, ContinuousClock.now < deadline {
                    let (status, body) = try await HTTP.request(stack.url(.registry) + widgetPath, headers: [("Authorization", "Bearer \(jwt)")])
                    invalidated = status == 200 && String(decoding: body, as: UTF8.self).contains("\"invalidated\"")
                    if !invalidated { try await Task.sleep(for: .milliseconds(100)) }
                }
                #expect(invalidated, "token-registry invalidated the widget token on APNs's 410")
                let end = driver.event(activity, .end, type: type, sequence: 6, fields: ["orderId": "42", "status": "delivered"])
                try await driver.publish(end)
                _ = try await driver.received(token: token, through: driver.requestId(end))
                try await Task.sleep(for: .seconds(2))
                #expect(try await stack.received(token: widgetToken).count == pushes.count, "nothing more goes to an invalidated widget token")
            }
        }
    }
}
