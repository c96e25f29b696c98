#!/usr/bin/env python3
"""The rules of scripts/check_doc_examples.py, each held to an example that breaks it (run by
scripts/test.sh before the check itself): a rule that cannot fail checks nothing. The model is the
one read from this tree's code, so a change to the routes that the reading misses fails here too.

  python3 scripts/test_check_doc_examples.py
"""
import copy
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_doc_examples as check  # noqa: E402

MODEL = check.build_model()

KEY = 'Authorization: Bearer $ISLET_CLI_GRPC_KEY'
JWT = 'Authorization: Bearer $JWT'
EVENT = '{"kind": "update", "bundleId": "com.example.food", "attributesType": "DeliveryAttributes", "sequence": 5}'
LOOKUP = ("grpcurl -plaintext -import-path Shared/IsletProtos -proto token_registry.proto -H \"authorization: Bearer $KEY\" "
          "-d '{\"activity_id\": \"order-42\"}' localhost:9081 islet.tokens.v1.TokenRegistry/LookupActivity")


def block(*lines, marker=None):
    return ((marker + "\n") if marker else "") + "```\n" + "\n".join(lines) + "\n```\n"


def verdicts(markdown, model=MODEL):
    return [check.verdict(example, model) for example in check.examples_in(markdown, "test.md")]


class Reading(unittest.TestCase):
    """What the check reads from the code: if this fails, the Swift changed shape."""

    def route(self, port, method, path):
        route, _ = check.match_route(MODEL.listeners[port].routes, method, path)
        self.assertIsNotNone(route, f"no {method} {path} on :{port}")
        return route

    def test_listeners(self):
        kinds = {port: (listener.service, listener.kind) for port, listener in MODEL.listeners.items()}
        self.assertEqual(kinds[8081], ("token-registry", "app"))
        self.assertEqual(kinds[8181], ("token-registry", "operator"))
        self.assertEqual(kinds[9081], ("token-registry", "grpc"))
        self.assertEqual(kinds[8083], ("content-service", "app"))
        self.assertEqual(kinds[8183], ("content-service", "operator"))
        self.assertEqual(kinds[9083], ("content-service", "grpc"))
        self.assertEqual(kinds[8082], ("apns-dispatcher", "app"))
        self.assertEqual(kinds[8084], ("analytics-ingest", "app"))
        self.assertEqual(kinds[8184], ("analytics-ingest", "operator"))
        self.assertEqual(kinds[8085], ("analytics-consumer", "app"))
        self.assertEqual(kinds[8090], ("apns-simulator", "admin"))

    def test_routes_and_what_they_check(self):
        token = self.route(8081, "PUT", "/v1/activities/x/token")
        self.assertEqual((token.header, token.scheme, token.credential, token.json_body), ("Authorization", "Bearer", "JWT", True))
        self.assertIn("frequentUpdatesEnabled", token.body_fields)
        events = self.route(8083, "POST", "/v1/activities/x/events")
        self.assertEqual((events.header, events.scheme, events.credential, events.json_body), ("Authorization", "Bearer", "backend key", True))
        self.assertEqual(self.route(8083, "GET", "/v1/activities/x/outcomes").credential, "backend key")
        taps = self.route(8084, "POST", "/v1/taps")
        self.assertEqual((taps.header, taps.json_body), (None, True))
        self.assertIsNone(self.route(8183, "GET", "/v1/activities/stale").header)
        self.assertFalse(self.route(8090, "POST", "/admin/faults").json_body)
        for port in (8081, 8083, 8084, 8090):
            self.assertIsNone(self.route(port, "GET", "/health").header)
        # /metrics: on the operator port where the app port faces phones.
        self.assertIsNone(check.match_route(MODEL.listeners[8081].routes, "GET", "/metrics")[0])
        self.route(8181, "GET", "/metrics")
        self.route(8083, "GET", "/metrics")

    def test_grpc(self):
        registry = MODEL.listeners[9081].grpc
        self.assertEqual(registry.open_methods["islet.tokens.v1.TokenRegistry/LookupActivity"], "read")
        self.assertEqual((registry.metadata, registry.scheme, registry.plaintext, registry.reflection), ("authorization", "Bearer", True, False))
        self.assertEqual(MODEL.listeners[9083].grpc.open_methods["islet.content.v1.ActivityService/Update"], "write")


class Extraction(unittest.TestCase):
    def test_continued_lines_quoted_bodies_inline_spans_and_comments(self):
        markdown = (
            "Inline: `curl -s localhost:8083/health` here.\n"
            + block(
                "# a comment with curl in it",
                "KEY=…   # the demo prints it",
                "curl -s http://127.0.0.1:8083/v1/activities/order-42/events -H \"" + KEY + "\" \\",
                "  -H 'Content-Type: application/json' \\",
                "  -d '{\"kind\": \"update\", \"bundleId\": \"com.example.food\",",
                "       \"attributesType\": \"DeliveryAttributes\", \"sequence\": 5}'",
                "docker compose ps && curl -s localhost:8090/admin/stats   # after it"))
        examples = check.examples_in(markdown, "test.md")
        self.assertEqual([(e.line, e.tool) for e in examples], [(1, "curl"), (5, "curl"), (9, "curl")])
        self.assertIn("DeliveryAttributes", examples[1].text)
        self.assertEqual([v.status for v in verdicts(markdown)], ["ok", "ok", "ok"])

    def test_shell_variables_in_a_body_are_placeholders(self):
        markdown = block("curl localhost:8090/admin/subscribers -d '{\"bundleId\": \"'\"$APP\"'\", \"channelId\": \"c\", \"count\": '\"$N\"'}'")
        self.assertEqual([v.status for v in verdicts(markdown)], ["ok"])


class Rules(unittest.TestCase):
    def assertRefused(self, command, fragment, model=MODEL):
        found = verdicts(block(command), model)
        self.assertEqual(len(found), 1, found)
        self.assertEqual(found[0].status, "FAIL", found[0])
        self.assertTrue(any(fragment in problem for problem in found[0].problems), f"expected {fragment!r}, got {found[0].problems}")

    def assertPasses(self, command):
        found = verdicts(block(command))
        self.assertEqual([v.status for v in found], ["ok"], found)


class CurlRules(Rules):
    def test_1_unknown_ports_are_skipped_and_grpc_ports_refused(self):
        found = verdicts(block("curl -s https://api.push.apple.com/3/device/abc", "curl -s localhost:9999/health"))
        self.assertEqual([v.status for v in found], ["skipped", "skipped"])
        self.assertIn("no Islet listener", found[0].problems[0])
        self.assertRefused("curl -s localhost:9081/health", "use grpcurl")

    def test_2_path_and_method(self):
        self.assertPasses(f"curl -s \"localhost:8083/v1/activities/$ACTIVITY?bundleId=a.b\" -H '{KEY}'")
        self.assertPasses(f"curl -s 'localhost:8083/v1/activities/{{activityId}}/outcomes' -H '{KEY}'")
        self.assertRefused(f"curl -s localhost:8083/v1/activity/order-42 -H '{KEY}'", "has no route /v1/activity/order-42")
        self.assertRefused(f"curl -s -X DELETE localhost:8083/v1/activities/order-42 -H '{KEY}'", "no DELETE /v1/activities/order-42, only GET")
        self.assertRefused(f"curl -s localhost:8083/v1/activities/order-42/events -H '{KEY}'", "no GET")  # no -d: a GET
        self.assertRefused("curl -s localhost:8081/metrics", "has no route /metrics")
        self.assertRefused("curl -s localhost:8083/v1/activities/stale", "sends no Authorization header")  # the app port: an activity id

    def test_3_credentials(self):
        self.assertRefused("curl -s localhost:8083/v1/activities/order-42", "sends no Authorization header")
        self.assertRefused("curl -s localhost:8083/v1/activities/order-42 -H 'X-Api-Key: $KEY'", "sends no Authorization header")
        self.assertRefused("curl -s localhost:8083/v1/activities/order-42 -H 'Authorization: $KEY'", "wants 'Bearer <backend key>'")
        self.assertRefused("curl -s localhost:8083/v1/activities/order-42 -u backend:secret", "wants 'Bearer <backend key>'")
        self.assertRefused(f"curl -s localhost:8081/v1/activities/order-42 -H '{KEY}'", "where the route checks a JWT")
        self.assertRefused(f"curl -s localhost:8083/v1/activities/order-42 -H '{JWT}'", "checks a backend key, not a JWT")
        self.assertRefused(f"curl -s localhost:8090/admin/stats -H '{KEY}'", "checks no credential")
        self.assertPasses(f"curl -s localhost:8081/v1/activities/order-42 -H '{JWT}'")
        self.assertPasses("curl -s localhost:8081/v1/activities/order-42 --oauth2-bearer \"$JWT\"")

    def test_4_json_bodies_need_their_content_type(self):
        self.assertRefused(f"curl -s localhost:8083/v1/activities/o/events -H '{KEY}' -d '{EVENT}'", "without 'Content-Type: application/json'")
        self.assertRefused(f"curl -s -X POST localhost:8083/v1/activities/o/events -H '{KEY}' -H 'Content-Type: application/json'", "sends no body")
        self.assertPasses(f"curl -s localhost:8083/v1/activities/o/events -H '{KEY}' --json '{EVENT}'")
        self.assertPasses("curl -s -X POST localhost:8090/admin/faults -d '{\"kind\": \"reset\"}'")  # the simulator takes any type

    def test_5_bodies(self):
        self.assertRefused(f"curl -s localhost:8083/v1/activities/o/events -H '{KEY}' --json '{{\"kind\": \"update\",}}'", "not JSON")
        self.assertRefused("curl -s -X POST localhost:8090/admin/faults -d '{\"kind\": \"reject\", \"status\": $STATUS}'", "not JSON")
        self.assertRefused(f"curl -s localhost:8083/v1/activities/o/events -H '{KEY}' --json '{EVENT[:-1]}, \"priority\": 10}}'",
                           "priority are not in docs/openapi.yaml's request schema")
        self.assertRefused(f"curl -s localhost:8083/v1/activities/o/events -H '{KEY}' --json '{{\"kind\": \"update\"}}'",
                           "lacks attributesType, bundleId, sequence")
        self.assertRefused(f"curl -s -X PUT localhost:8081/v1/activities/o/frequent-updates -H '{JWT}' --json '{{\"enable\": true}}'",
                           "enable are not read by FrequentUpdatesRequest")
        self.assertRefused("curl -s -X POST localhost:8090/admin/faults -d '{\"kind\": \"reject\", \"state\": 410}'", "state are not read by Fault")


class GrpcurlRules(Rules):
    def test_the_readme_example_passes(self):
        self.assertPasses(LOOKUP)

    def test_1_address(self):
        self.assertRefused(LOOKUP.replace("localhost:9081", "localhost:8081"), "an HTTP listener: use curl")
        self.assertEqual([v.status for v in verdicts(block(LOOKUP.replace("localhost:9081", "localhost:9999")))], ["skipped"])

    def test_2_method(self):
        self.assertRefused(LOOKUP.replace("islet.tokens.v1", "islet.registry.v1"), "no proto service islet.registry.v1.TokenRegistry")
        self.assertRefused(LOOKUP.replace("LookupActivity", "GetActivity"), "has no method GetActivity")
        self.assertRefused(LOOKUP.replace("localhost:9081", "localhost:9083"),
                           "serves islet.content.v1.ActivityService, not islet.tokens.v1.TokenRegistry")
        closed = copy.deepcopy(MODEL)
        del closed.listeners[9081].grpc.open_methods["islet.tokens.v1.TokenRegistry/LookupActivity"]
        self.assertRefused(LOOKUP, "refused to every backend", model=closed)

    def test_3_transport_and_protos(self):
        self.assertRefused(LOOKUP.replace("-plaintext ", ""), "no -plaintext")
        self.assertRefused(LOOKUP.replace("-import-path Shared/IsletProtos -proto token_registry.proto ", ""), "no reflection")
        self.assertRefused(LOOKUP.replace("-import-path Shared/IsletProtos ", ""), "is not under -import-path .")
        self.assertRefused(LOOKUP.replace("token_registry.proto", "activity_service.proto"), "does not define islet.tokens.v1.TokenRegistry")

    def test_4_metadata(self):
        self.assertRefused(LOOKUP.replace('-H "authorization: Bearer $KEY" ', ""), "sends no authorization header")
        self.assertRefused(LOOKUP.replace("authorization: Bearer $KEY", "x-api-key: $KEY"), "sends no authorization header")
        self.assertRefused(LOOKUP.replace("Bearer $KEY", "$KEY"), "wants 'Bearer <backend key>'")

    def test_5_request_fields(self):
        self.assertPasses(LOOKUP.replace("activity_id", "activityId"))  # grpcurl takes the JSON name too
        self.assertRefused(LOOKUP.replace("activity_id", "activity"), "activity is no field of islet.tokens.v1.LookupActivityRequest")
        self.assertRefused(LOOKUP.replace('"order-42"}', '"order-42",}'), "-d is not JSON")
        update = ("grpcurl -plaintext -import-path Shared/IsletProtos -proto activity_service.proto -H 'authorization: Bearer $KEY' "
                  "-d '{\"activity_id\": \"a\", \"start_target\": {\"bundle_id\": \"a.b\", \"device\": \"d\"}, \"fields\": {\"any\": 1}}' "
                  "localhost:9083 islet.content.v1.ActivityService/Start")
        self.assertRefused(update, "start_target.device is no field of islet.content.v1.PushToStartTarget")
        self.assertPasses(update.replace('"device"', '"deviceId"'))


class RefusedMarker(unittest.TestCase):
    MARK = "<!-- example: refused -->"

    def test_a_marked_example_must_break_a_rule(self):
        found = verdicts(block("curl -s localhost:8083/v1/activities/order-42", marker=self.MARK))
        self.assertEqual(found[0].status, "ok")
        self.assertIn("refused as marked", found[0].summary)
        found = verdicts(block("curl -s localhost:8083/health", marker=self.MARK))
        self.assertEqual(found[0].status, "FAIL")
        self.assertIn("breaks no rule", found[0].problems[0])

    def test_the_mark_is_on_the_line_before_the_fence_only(self):
        found = verdicts(self.MARK + "\n\nSome text.\n\n" + block("curl -s localhost:8083/v1/activities/order-42"))
        self.assertEqual(found[0].status, "FAIL")


if __name__ == "__main__":
    unittest.main(verbosity=1)
