import APNsSimulator
import Foundation
import GRPCCore
import GRPCNIOTransportHTTP2
import IsletLinks
import IsletMessages
import IsletProtos
import NIOHTTP1
import SwiftProtobuf
import Testing

#if canImport(Glibc)
    import Glibc
#endif

extension EndToEnd {
    @Suite("End to end: hostile input", .timeLimit(.minutes(10)))
    struct HostileInputTests {
        static let requestTimeout: Duration = .seconds(4)
        static let quota = 3

        @Test("oversize and nested bodies, bad UTF-8, wrong token lengths, forged and replayed taps, another user's activity, slow clients: only 4xx or a closed connection, the services stay up with bounded memory, and no log line holds a token or a key")
        func hostile() async throws {
            // Short request deadlines and a small cap per address, so that the slow clients below
            // meet both within the test.
            let limits = ["ISLET_HTTP_REQUEST_TIMEOUT_MS": "\(Int(Self.requestTimeout.components.seconds) * 1_000)", "ISLET_HTTP_MAX_CONNECTIONS_PER_ADDRESS": "40"]
            // A small quota of live activities per user, met by a user of this run's own.
            let quota = ["ISLET_QUOTA_LIVE_ACTIVITIES": "\(Self.quota)"]
            let stack = try Stack(name: "hostile-input", extra: [.registry: limits.merging(quota) { $1 }, .ingest: limits])
            try await stack.run { driver in try await run(stack: stack, driver: driver) }
            scanLogs(of: stack)
        }

        /// Sends `body` and returns the status, or `nil` when the server closed the connection instead.
        func send(_ stack: Stack, _ service: ServiceProcess.Name, _ method: String, _ path: String, _ body: [UInt8], jwt: String? = nil) async -> Int? {
            let headers = jwt.map { [("Authorization", "Bearer \($0)")] } ?? []
            return try? await HTTP.request(stack.url(service) + path, method: .init(rawValue: method), headers: headers, body: body, timeout: .seconds(20)).0
        }

        func run(stack: Stack, driver: Driver) async throws {
            // Users of this run only.
            let owner = "owner-" + UUID().uuidString.prefix(8).lowercased()
            let jwt = try await stack.jwt(user: owner)
            let intruder = try await stack.jwt(user: "user-2")
            let activity = driver.run + "mine"
            let token = Driver.token(activity)
            try await driver.registerActivity(activity, token: token, type: "DeliveryAttributes", bundleId: "com.example.food", user: owner)
            func registration(token: String) -> [UInt8] {
                Array(#"{"token":"\#(token)","attributesType":"DeliveryAttributes","app":{"bundleId":"com.example.food","environment":"production"},"frequentUpdatesEnabled":false,"appVersion":"3.0"}"#.utf8)
            }
            let nesting = Array(String(repeating: "[", count: 100_000).utf8) + Array(String(repeating: "]", count: 100_000).utf8)
            // Deep but small: within the 8 KB body limit, so the JSON parser itself meets it.
            let smallNesting = Array(String(repeating: "[", count: 4_000).utf8) + Array(String(repeating: "]", count: 4_000).utf8)
            let objectNesting = Array(String(repeating: #"{"a":"#, count: 50_000).utf8) + [UInt8(ascii: "1")] + Array(String(repeating: "}", count: 50_000).utf8)
            let badUTF8: [UInt8] = Array(#"{"token":""#.utf8) + [0xC3, 0x28, 0xFF, 0xFE] + Array(#"","appVersion":"3.0"}"#.utf8)
            let registryPath = "/v1/activities/\(driver.run)other/token"

            var statuses: [(String, Int?)] = []
            func expectRefused(_ what: String, _ status: Int?) {
                statuses.append((what, status))
                #expect(status == nil || (400..<500).contains(status!), "\(what): answered \(status.map(String.init) ?? "-")")
            }
            // token-registry
            expectRefused("registry: 2 MB body", await send(stack, .registry, "PUT", registryPath, [UInt8](repeating: UInt8(ascii: "a"), count: 2 << 20), jwt: jwt))
            expectRefused("registry: array nesting bomb", await send(stack, .registry, "PUT", registryPath, nesting, jwt: jwt))
            expectRefused("registry: 4,000 levels of nesting in 8 KB", await send(stack, .registry, "PUT", registryPath, smallNesting, jwt: jwt))
            expectRefused("registry: object nesting bomb", await send(stack, .registry, "PUT", registryPath, objectNesting, jwt: jwt))
            expectRefused("registry: bad UTF-8", await send(stack, .registry, "PUT", registryPath, badUTF8, jwt: jwt))
            for length in [0, 63, 65, 10_000] {
                expectRefused("registry: token of \(length) hex digits", await send(stack, .registry, "PUT", registryPath, registration(token: String(repeating: "a", count: length)), jwt: jwt))
            }
            expectRefused("registry: non-hex token", await send(stack, .registry, "PUT", registryPath, registration(token: String(repeating: "zz", count: 32)), jwt: jwt))
            expectRefused("registry: no JWT", await send(stack, .registry, "PUT", registryPath, registration(token: Driver.token("x"))))
            expectRefused("registry: forged JWT", await send(stack, .registry, "PUT", registryPath, registration(token: Driver.token("x")), jwt: jwt.dropLast(4) + "AAAA"))
            for (what, claims) in [
                ("a JWT valid only from an hour ahead (nbf)", try await stack.jwt(user: "user-1", notBefore: 3_600)),
                ("a JWT valid for 100 years", try await stack.jwt(user: "user-1", lifetime: 100 * 365 * 86_400)),
            ] {
                let status = await send(stack, .registry, "PUT", registryPath, registration(token: Driver.token("x")), jwt: claims)
                expectRefused("registry: \(what)", status)
                #expect(status == 401, "registry: \(what): \(status.map(String.init) ?? "-")")
            }
            // Another user's activity: neither readable nor changeable.
            expectRefused(
                "registry: another user reads it",
                try? await HTTP.request(stack.url(.registry) + "/v1/activities/\(activity)", headers: [("Authorization", "Bearer \(intruder)")]).0)
            expectRefused("registry: another user re-registers it", await send(stack, .registry, "PUT", "/v1/activities/\(activity)/token", registration(token: Driver.token("hijack")), jwt: intruder))
            expectRefused("registry: another user invalidates it", await send(stack, .registry, "POST", "/v1/activities/\(activity)/invalidate", Array(#"{"reason":"clientEnded"}"#.utf8), jwt: intruder))
            // Metrics are for operators: not on the ports phones reach, only on the operator listeners.
            for service in [ServiceProcess.Name.registry, .ingest] {
                let (appStatus, _) = try await HTTP.request(stack.url(service) + "/metrics")
                #expect(appStatus == 404, "\(service): /metrics on the app port answered \(appStatus)")
                let (operatorStatus, _) = try await HTTP.request("http://127.0.0.1:\(stack.operatorPorts[service]!)/metrics")
                #expect(operatorStatus == 200, "\(service): /metrics on the operator port answered \(operatorStatus)")
            }
            // content-service's stale list names activities: on its operator listener, not on the port orchestrators probe.
            // There, the path is the backends' question about an activity named "stale", which needs a backend key.
            let (staleOnHTTP, staleOnHTTPBody) = try await HTTP.request(stack.url(.content) + "/v1/activities/stale")
            #expect(staleOnHTTP == 401, "content-service: the stale list's path on its HTTP port answered \(staleOnHTTP)")
            #expect(!String(decoding: staleOnHTTPBody, as: UTF8.self).contains("\"activities\""), "no stale list on the HTTP port")
            let (staleOnOperator, staleBody) = try await HTTP.request("http://127.0.0.1:\(stack.operatorPorts[.content]!)/v1/activities/stale")
            #expect(staleOnOperator == 200 && String(decoding: staleBody, as: UTF8.self).hasPrefix("{\"activities\":"), "content-service: the stale list on its operator port answered \(staleOnOperator)")
            // Squatting a guessable id: another user registers it before its owner. The owner's
            // registration with the backend's ticket takes it back; the squatter cannot take it
            // again, nor pass off a ticket of its own for it; the backend's update reaches the
            // owner's phone and never the squatter's.
            let order = driver.run + "order-43"
            let squatter = "squatter-" + UUID().uuidString.prefix(8).lowercased()
            let (squatterToken, ownerToken) = (Driver.token(order + "-squatter"), Driver.token(order + "-owner"))
            try await driver.registerActivity(order, token: squatterToken, type: "DeliveryAttributes", bundleId: "com.example.food", user: squatter)
            func ticketed(token: String, ticket: String) -> [UInt8] {
                Array(#"{"token":"\#(token)","attributesType":"DeliveryAttributes","app":{"bundleId":"com.example.food","environment":"production"},"frequentUpdatesEnabled":false,"appVersion":"3.0","ticket":"\#(ticket)"}"#.utf8)
            }
            let (claimStatus, claimBody) = try await HTTP.request(
                stack.url(.registry) + "/v1/activities/\(order)/token", method: .PUT, headers: [("Authorization", "Bearer \(jwt)")],
                body: ticketed(token: ownerToken, ticket: try await stack.ticket(user: owner, activity: order, bundleId: "com.example.food")))
            #expect(claimStatus == 201 && String(decoding: claimBody, as: UTF8.self).contains("\"claimed\""), "the owner's ticket: \(claimStatus) \(String(decoding: claimBody, as: UTF8.self))")
            let squatterJWT = try await stack.jwt(user: squatter)
            let retake = await send(stack, .registry, "PUT", "/v1/activities/\(order)/token", registration(token: squatterToken), jwt: squatterJWT)
            expectRefused("registry: the squatter registers the claimed id again", retake)
            #expect(retake == 403, "the squatter again: \(retake.map(String.init) ?? "-")")
            let ownTicket = try await stack.ticket(user: squatter, activity: order + "x", bundleId: "com.example.food")
            let otherTicket = await send(stack, .registry, "PUT", "/v1/activities/\(order)/token", ticketed(token: squatterToken, ticket: ownTicket), jwt: squatterJWT)
            #expect(otherTicket == 403, "the squatter with a ticket for another id: \(otherTicket.map(String.init) ?? "-")")
            let update = driver.event(order, .update, type: "DeliveryAttributes", sequence: 1, fields: ["orderId": "43", "storeName": "Casa Lola", "status": "preparing"])
            try await driver.publish(update)
            _ = try await driver.received(token: ownerToken, through: driver.requestId(update))
            #expect(try await stack.received(token: squatterToken, payloads: false).isEmpty, "a push reached the squatter's token")

            // Activity ids are scoped per app: a user of the ride app registers the same id there
            // (201, not the 409 of one namespace for every app). Each backend's update reaches its
            // own app's token only; an event that names no app, for an id two apps use, is refused
            // (dead-lettered) and reaches nobody.
            let rider = "rider-" + UUID().uuidString.prefix(8).lowercased()
            let riderToken = Driver.token(order + "-rider")
            // Only the apps the registry serves (ISLET_APPS): an id cannot be parked under an app that does not exist.
            let fakeApp = await #expect(throws: E2EFailure.self) {
                try await driver.registerActivity(order, token: riderToken, type: "RideAttributes", bundleId: "com.fake.app", user: rider, retryFor: .zero)
            }
            #expect(fakeApp?.status == 400, "an app the registry does not serve: \(fakeApp.map(String.init(describing:)) ?? "-")")
            let rideStatus = try await driver.registerActivity(order, token: riderToken, type: "RideAttributes", bundleId: "com.example.ride", user: rider)
            #expect(rideStatus == 201, "the same id in another app: \(rideStatus)")
            let (ownStatus, own) = try await HTTP.request(stack.url(.registry) + "/v1/activities/\(order)", headers: [("Authorization", "Bearer \(jwt)")])
            #expect(ownStatus == 200 && String(decoding: own, as: UTF8.self).contains("com.example.food"), "the owner still reads its own: \(ownStatus)")
            let rideFields: [String: JSONValue] = [
                "rideId": .string(order), "phase": "en_route", "driver": ["name": "Sam", "vehicle": "Blue Prius", "plate": "KX 42 LT"], "progress": 40,
            ]
            let rideUpdate = driver.event(order, .update, type: "RideAttributes", sequence: 1, fields: rideFields, bundleId: "com.example.ride")
            let foodUpdate = driver.event(
                order, .update, type: "DeliveryAttributes", sequence: 2, fields: ["orderId": "43", "storeName": "Casa Lola", "status": "out_for_delivery"],
                bundleId: "com.example.food")
            let unnamed = ActivityEvent(
                eventId: order + "-unnamed", activityId: order, kind: .update, attributesType: "DeliveryAttributes",
                fields: ["orderId": "43", "storeName": "Casa Lola", "status": "arriving"], urgency: .important, occurredAt: Date(), sequence: 3)
            let last = driver.event(
                order, .update, type: "DeliveryAttributes", sequence: 4, fields: ["orderId": "43", "storeName": "Casa Lola", "status": "arriving"],
                bundleId: "com.example.food")
            for event in [rideUpdate, foodUpdate, unnamed, last] { try await driver.publish(event) }
            // One partition holds all four (partitioned by the activity id): once the last arrived, the rest were handled.
            _ = try await driver.received(token: riderToken, through: driver.requestId(rideUpdate))
            let toOwner = try await driver.received(token: ownerToken, through: driver.requestId(last)).map { $0.apnsID.lowercased() }
            let toRider = try await stack.received(token: riderToken, payloads: false).map { $0.apnsID.lowercased() }
            #expect(toOwner.contains(driver.requestId(foodUpdate)) && !toOwner.contains(driver.requestId(rideUpdate)), "the food owner got the ride's update")
            #expect(!toRider.contains(driver.requestId(foodUpdate)) && !toRider.contains(driver.requestId(last)), "the rider got the food order's update")
            for bundleId in ["com.example.food", "com.example.ride"] {
                let id = driver.requestId(unnamed, bundleId: bundleId)
                #expect(!toOwner.contains(id) && !toRider.contains(id), "an event naming no app, for an id two apps use, was sent to \(bundleId)")
            }
            #expect(try await stack.received(token: squatterToken, payloads: false).isEmpty, "a push reached the squatter's token")

            // The backends' gRPC APIs: no key, or a wrong one, is UNAUTHENTICATED; the configured key works.
            try await withGRPCClient(
                transport: .http2NIOPosix(target: .ipv4(address: "127.0.0.1", port: stack.grpcPorts[.registry]!), transportSecurity: .plaintext)
            ) { client in
                let registry = Islet_Tokens_V1_TokenRegistry.Client(wrapping: client)
                let lookup = Islet_Tokens_V1_LookupActivityRequest.with { $0.activityID = activity }
                let invalidate = Islet_Tokens_V1_InvalidateActivityRequest.with {
                    $0.activityID = activity
                    $0.reason = "backendEnded"
                }
                for (what, metadata) in [("no key", Metadata()), ("a wrong key", ["authorization": "Bearer \(Stack.randomHex(32))"] as Metadata)] {
                    await #expect("registry gRPC lookup with \(what)") { _ = try await registry.lookupActivity(lookup, metadata: metadata) } throws: {
                        ($0 as? RPCError)?.code == .unauthenticated
                    }
                    await #expect("registry gRPC invalidation with \(what)") { _ = try await registry.invalidateActivity(invalidate, metadata: metadata) } throws: {
                        ($0 as? RPCError)?.code == .unauthenticated
                    }
                }
                let state = try await registry.lookupActivity(lookup, metadata: ["authorization": "Bearer \(stack.backendKey)"])
                #expect(state.userID == owner, "the backend's key reads the activity")
            }
            try await withGRPCClient(
                transport: .http2NIOPosix(target: .ipv4(address: "127.0.0.1", port: stack.grpcPorts[.content]!), transportSecurity: .plaintext)
            ) { client in
                let content = Islet_Content_V1_ActivityService.Client(wrapping: client)
                let alert = Islet_Content_V1_ActivityEventRequest.with {
                    $0.eventID = "hostile-1"
                    $0.activityID = activity
                    $0.attributesType = "DeliveryAttributes"
                    $0.urgency = "important"
                    $0.sequence = 99
                    $0.fields = .with { $0.fields = ["status": .init(stringValue: "delivered"), "orderId": .init(stringValue: "1")] }
                }
                await #expect("content gRPC update without a key") { _ = try await content.update(alert) } throws: {
                    ($0 as? RPCError)?.code == .unauthenticated
                }
            }
            // The quota: a user with as many live activities as allowed gets 429 for one more, and nothing is written.
            let greedy = "greedy-" + UUID().uuidString.prefix(8).lowercased()
            for number in 0..<Self.quota {
                let id = "\(driver.run)greedy-\(number)"
                try await driver.registerActivity(id, token: Driver.token(id), type: "DeliveryAttributes", bundleId: "com.example.food", user: greedy)
            }
            let (quotaStatus, quotaBody) = try await HTTP.request(
                stack.url(.registry) + "/v1/activities/\(driver.run)greedy-more/token", method: .PUT,
                headers: [("Authorization", "Bearer \(try await stack.jwt(user: greedy))")], body: registration(token: Driver.token("more")))
            #expect(quotaStatus == 429 && String(decoding: quotaBody, as: UTF8.self).contains("quotaExceeded"), "over the quota: \(quotaStatus) \(String(decoding: quotaBody, as: UTF8.self))")
            let (mineStatus, mine) = try await HTTP.request(stack.url(.registry) + "/v1/activities/\(activity)", headers: [("Authorization", "Bearer \(jwt)")])
            #expect(mineStatus == 200 && String(decoding: mine, as: UTF8.self).contains("\"active\""), "the owner's token is untouched")

            // analytics-ingest
            expectRefused("ingest: 2 MB body", await send(stack, .ingest, "POST", "/v1/taps", [UInt8](repeating: UInt8(ascii: "a"), count: 2 << 20)))
            expectRefused("ingest: array nesting bomb", await send(stack, .ingest, "POST", "/v1/taps", nesting))
            expectRefused("ingest: 4,000 levels of nesting in 8 KB", await send(stack, .ingest, "POST", "/v1/taps", smallNesting))
            expectRefused("ingest: 4,000 levels of nesting in a batch", await send(stack, .ingest, "POST", "/v1/taps/batch", smallNesting))
            expectRefused("ingest: object nesting bomb", await send(stack, .ingest, "POST", "/v1/taps/batch", objectNesting))
            expectRefused("ingest: bad UTF-8", await send(stack, .ingest, "POST", "/v1/taps", badUTF8))
            let key = try #require(try LinkKeyring.keys(fromSecrets: [stack.linkKey.kid: stack.linkKey.secret]).first)
            let link = try DeepLinkCodec.sign(
                baseURL: "fooddelivery://order/1",
                target: TapTarget(activityId: activity, attributesType: "DeliveryAttributes", surface: .lockScreen, element: "status", contentSequence: 1),
                issuedAt: Date(), key: key)
            let forged = link.replacingOccurrences(of: "isl_q=1", with: "isl_q=2")
            func tap(_ url: String, at: Date = Date()) -> [UInt8] {
                JSONValue.object(["url": .string(url), "tappedAt": .string(IsletDate.format(at)), "appVersion": "3.0", "osVersion": "18.1"]).jsonBytes
            }
            expectRefused("ingest: forged tap", await send(stack, .ingest, "POST", "/v1/taps", tap(forged)))
            // A tap time 0.2 s into its second (the last second begun): + 1 ms stays in that second.
            let now = Date().timeIntervalSince1970
            let when = Date(timeIntervalSince1970: now - now.truncatingRemainder(dividingBy: 1) + 0.2 - (now.truncatingRemainder(dividingBy: 1) < 0.2 ? 1 : 0))
            let firstSent = ContinuousClock.now
            let first = try await HTTP.request(stack.url(.ingest) + "/v1/taps", method: .POST, body: tap(link, at: when))
            let replay = try await HTTP.request(stack.url(.ingest) + "/v1/taps", method: .POST, body: tap(link, at: when))
            #expect(first.0 == 200 && String(decoding: first.1, as: UTF8.self).contains("accepted"))
            #expect(replay.0 == 200 && String(decoding: replay.1, as: UTF8.self).contains("duplicate"), "a replayed tap is counted once")
            // The respellings and re-timings that were each a new click: every one is the same click.
            let firstId = (try? IsletJSON.decodeValue(JSONValue.self, from: first.1))?["clickId"]?.stringValue
            let signature = String(link[link.range(of: "isl_sig=")!.upperBound...])
            // First the re-timing by seconds: a new click only once the link's second (server time) is over.
            let variants: [(String, String, Date)] = [
                ("tappedAt 2 s earlier, within the link's second", link, when.addingTimeInterval(-2)), ("a trailing &", link + "&", when), ("an empty item", link.replacingOccurrences(of: "&isl_e=", with: "&&isl_e="), when),
                ("isl_k percent-encoded", link.replacingOccurrences(of: "isl_k=e2e", with: "isl_k=%65%32%65"), when),
                ("isl_sig first", link.replacingOccurrences(of: "&isl_sig=" + signature, with: "").replacingOccurrences(of: "?isl_a=", with: "?isl_sig=\(signature)&isl_a="), when),
                ("tappedAt + 1 ms", link, when.addingTimeInterval(0.001)),
            ]
            for (what, url, at) in variants {
                let sentAfter = ContinuousClock.now - firstSent
                let (status, body) = try await HTTP.request(stack.url(.ingest) + "/v1/taps", method: .POST, body: tap(url, at: at))
                let answer = try? IsletJSON.decodeValue(JSONValue.self, from: body)
                if Int(at.timeIntervalSince1970.rounded(.down)) != Int(when.timeIntervalSince1970.rounded(.down)) && sentAfter > .milliseconds(900) {
                    // Another tap second: the same click only within the link's second of server
                    // time, which a starved machine may have spent before this request.
                    print("ingest: \(what) sent \(sentAfter) after the first tap: \(answer?["verdict"]?.stringValue ?? "-")")
                    continue
                }
                #expect(
                    status == 200 && answer?["verdict"]?.stringValue == "duplicate" && answer?["clickId"]?.stringValue == firstId,
                    "ingest: \(what) is the same click: \(status) \(String(decoding: body, as: UTF8.self))")
            }

            // Slow clients, from another address (127.0.0.2): connections that send a few header
            // bytes and then nothing, while others are served. Past the cap of 40 per address a
            // connection is closed at once; the others when the request deadline passes.
            let opened = ContinuousClock.now
            let slow = try (0..<50).map { _ in try SlowClient(port: stack.ports[.ingest]!, from: "127.0.0.2") }
            let slowRegistry = try (0..<50).map { _ in try SlowClient(port: stack.ports[.registry]!, from: "127.0.0.2") }
            for _ in 0..<20 {
                let (status, _) = try await HTTP.request(stack.url(.ingest) + "/v1/taps", method: .POST, body: tap(link), timeout: .seconds(10))
                #expect(status == 200, "served beside 50 slow clients")
                let health = await HTTP.status(stack.url(.registry) + "/health")
                #expect(health == 200)
            }
            let closedAtOnce = (slow + slowRegistry).filter(\.closedByPeer).count
            #expect(closedAtOnce >= 20, "past the cap of 40 per address: \(closedAtOnce) of 100 closed at once")
            while ContinuousClock.now < opened + Self.requestTimeout + .seconds(3), !(slow + slowRegistry).allSatisfy(\.closedByPeer) {
                try await Task.sleep(for: .milliseconds(200))
            }
            let stillOpen = (slow + slowRegistry).filter { !$0.closedByPeer }.count
            #expect(stillOpen == 0, "\(stillOpen) slow connections still open \(ContinuousClock.now - opened) after they opened (request timeout \(Self.requestTimeout))")
            slow.forEach { $0.close() }
            slowRegistry.forEach { $0.close() }

            // Still up, memory bounded.
            for name in ServiceProcess.Name.allCases {
                #expect(stack[name].isRunning, "\(name.rawValue) is running")
                let rss = stack[name].pid.flatMap(Self.residentMegabytes) ?? 0
                print("hostile input: \(name.rawValue) resident \(rss) MB")
                #expect(rss < 600, "\(name.rawValue) uses \(rss) MB")
            }
            print("hostile input: " + statuses.map { "\($0.0) → \($0.1.map(String.init) ?? "closed")" }.joined(separator: "; "))
        }

        /// No log line of any end-to-end run holds a device token, a key or a JWT.
        func scanLogs(of stack: Stack) {
            let directory = stack.directory.deletingLastPathComponent()
            let files = (FileManager.default.enumerator(atPath: directory.path)?.allObjects as? [String] ?? []).filter { $0.hasSuffix(".log") }
            #expect(!files.isEmpty)
            let secrets = [stack.jwtKey.secret, stack.linkKey.secret, "PRIVATE KEY", "eyJ"]
            var lines = 0
            for file in files {
                guard let text = try? String(contentsOfFile: directory.appendingPathComponent(file).path, encoding: .utf8) else { continue }
                for line in text.split(separator: "\n") {
                    lines += 1
                    // A device token (or a 32-byte key) is 64 hex digits in a row.
                    if line.contains(/[0-9a-fA-F]{64}/) || secrets.contains(where: line.contains) {
                        Issue.record("\(file): a log line holds a token or a key: \(line.prefix(200))")
                    }
                }
            }
            print("hostile input: scanned \(lines) log lines in \(files.count) files")
        }

        static func residentMegabytes(_ pid: Int32) -> Int? {
            guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
                let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") }),
                let kilobytes = line.split(separator: " ").dropFirst().first.flatMap({ Int($0) })
            else { return nil }
            return kilobytes / 1_024
        }
    }
}

/// A client that opens a connection, sends part of a request's headers, and then nothing.
final class SlowClient: Sendable {
    let fd: Int32

    init(port: Int, from source: String = "127.0.0.1") throws {
        fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var local = sockaddr_in()
        local.sin_family = sa_family_t(AF_INET)
        local.sin_addr.s_addr = inet_addr(source)
        let bound = withUnsafePointer(to: &local) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { throw E2EFailure("bind to \(source) failed") }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { throw E2EFailure("connect failed") }
        let partial = Array("POST /v1/taps HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Le".utf8)
        _ = partial.withUnsafeBytes { write(fd, $0.baseAddress, $0.count) }
    }

    func close() { _ = Glibc.close(fd) }

    /// Whether the server closed the connection (a read finds the end of the stream, or a reset).
    var closedByPeer: Bool {
        var byte: UInt8 = 0
        let read = recv(fd, &byte, 1, Int32(MSG_PEEK | MSG_DONTWAIT))
        return read == 0 || (read < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
    }
}
