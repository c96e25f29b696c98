#!/usr/bin/env python3
"""The Kafka rules of scripts/check_compose.py, each held to a node's properties that break it (run by
scripts/check-compose.sh before the checks themselves): a rule that cannot fail checks nothing.

  python3 scripts/test_check_compose.py
"""
import contextlib
import io
import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_compose  # noqa: E402

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
NODE_SCRIPT = os.path.join(REPO, "deploy", "kafka-node.sh")


def node_environment(node_id="1", host="kafka", voters="1@kafka:9093", factor="1", minimum="1"):
    return {
        "KAFKA_NODE_ID": node_id, "KAFKA_HOST": host, "KAFKA_CONTROLLER_QUORUM_VOTERS": voters,
        "KAFKA_REPLICATION_FACTOR": factor, "KAFKA_MIN_INSYNC_REPLICAS": minimum, "ADVERTISED_HOST_PORT": "9094",
        "KAFKA_ADMIN_PASSWORD": "admin-secret", "KAFKA_CONTROLLER_PASSWORD": "controller-secret",
    }


def shipped(**overrides):
    """The properties deploy/kafka-node.sh writes, as parsed by the checker."""
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    environment.update(node_environment(**overrides))
    text = subprocess.run(["bash", NODE_SCRIPT, "--print"], env=environment, capture_output=True, text=True, check=True).stdout
    return check_compose.parse_properties(text)


def problems(properties, brokers=1):
    return check_compose.check_node(check_compose.Report(), "kafka", properties, brokers)


class NodeRules(unittest.TestCase):
    def assertRefused(self, properties, fragment, brokers=1):
        found = problems(properties, brokers)
        self.assertTrue(any(fragment in problem for problem in found), f"expected a problem with {fragment!r}, got {found}")

    def test_shipped_properties_pass(self):
        self.assertEqual(problems(shipped()), [])
        self.assertEqual(problems(shipped(factor="3", minimum="2"), brokers=3), [])

    def test_a_sasl_listener_without_its_jaas_entry(self):
        # The shipped file until issue 58: Kafka refuses to start.
        properties = shipped()
        del properties["listener.name.external.scram-sha-512.sasl.jaas.config"]
        self.assertRefused(properties, "EXTERNAL offers SCRAM-SHA-512 without a JAAS entry")

    def test_a_jaas_entry_of_another_mechanism(self):
        properties = shipped()
        properties["listener.name.external.scram-sha-512.sasl.jaas.config"] = check_compose.LOGIN_MODULES["PLAIN"] + " required;"
        self.assertRefused(properties, "is not org.apache.kafka.common.security.scram.ScramLoginModule")

    def test_anonymous_super_user_and_a_plaintext_controller(self):
        properties = shipped()
        properties["super.users"] += ";User:ANONYMOUS"
        self.assertRefused(properties, "User:ANONYMOUS is a super user")
        properties = shipped()
        properties["listener.security.protocol.map"] = properties["listener.security.protocol.map"].replace("CONTROLLER:SASL_PLAINTEXT", "CONTROLLER:PLAINTEXT")
        self.assertRefused(properties, "listener CONTROLLER is PLAINTEXT")

    def test_scram_on_the_controller_listener(self):
        properties = shipped()
        properties["listener.name.controller.sasl.enabled.mechanisms"] = "SCRAM-SHA-512"
        properties["sasl.mechanism.controller.protocol"] = "SCRAM-SHA-512"
        properties["listener.name.controller.scram-sha-512.sasl.jaas.config"] = properties["listener.name.internal.scram-sha-512.sasl.jaas.config"]
        self.assertRefused(properties, "SCRAM credentials live in the metadata log")

    def test_controller_mechanism_not_offered(self):
        properties = shipped()
        del properties["sasl.mechanism.controller.protocol"]  # GSSAPI by default
        self.assertRefused(properties, "sasl.mechanism.controller.protocol=GSSAPI is not offered")

    def test_the_nodes_own_users_must_be_super_users(self):
        properties = shipped()
        properties["super.users"] = "User:admin"
        self.assertRefused(properties, "user controller is not a super user")
        properties = shipped()
        properties["listener.name.controller.plain.sasl.jaas.config"] = properties["listener.name.controller.plain.sasl.jaas.config"].replace("user_controller", "user_someone")
        self.assertRefused(properties, "does not accept its own user controller")

    def test_listener_names_agree(self):
        properties = shipped()
        properties["advertised.listeners"] += ",OTHER://localhost:9999"
        self.assertRefused(properties, "advertised.listeners names OTHER")
        properties = shipped()
        properties["inter.broker.listener.name"] = "CONTROLLER"
        self.assertRefused(properties, "is a controller listener")
        properties = shipped()
        properties["listener.security.protocol.map"] = "INTERNAL:SASL_PLAINTEXT,CONTROLLER:SASL_PLAINTEXT"
        self.assertRefused(properties, "listener EXTERNAL has no security protocol")
        properties = shipped()
        properties["advertised.listeners"] = "EXTERNAL://localhost:9094"
        self.assertRefused(properties, "the inter-broker listener INTERNAL is not among advertised.listeners")

    def test_tls_without_client_certificates_is_unauthenticated(self):
        properties = shipped()
        properties["listener.security.protocol.map"] = properties["listener.security.protocol.map"].replace("EXTERNAL:SASL_PLAINTEXT", "EXTERNAL:SSL")
        self.assertRefused(properties, "listener EXTERNAL is SSL")
        properties["listener.name.external.ssl.client.auth"] = "required"
        self.assertFalse(any("listener EXTERNAL is SSL" in problem for problem in problems(properties)))

    def test_replication_within_the_brokers(self):
        properties = shipped()
        del properties["offsets.topic.replication.factor"]  # 3 by default: consumer groups never work on one broker
        self.assertRefused(properties, "offsets.topic.replication.factor=3 with 1 broker(s)")
        self.assertRefused(shipped(factor="3", minimum="3"), "min.insync.replicas=3 with replication factor 3", brokers=3)
        self.assertRefused(shipped(factor="3", minimum="2"), "default.replication.factor=3 with 2 broker(s)", brokers=2)


class Nodes(unittest.TestCase):
    HOSTS = ("kafka", "kafka-2", "kafka-3")
    VOTERS = "1@kafka:9093,2@kafka-2:9093,3@kafka-3:9093"

    def services(self, voters=VOTERS, count=3, factor="3", minimum="2", init_factor="3", bootstrap=None, ids=None):
        services = {}
        for number, host in enumerate(self.HOSTS[:count], start=1):
            node_id = str(ids[number - 1] if ids else number)
            environment = node_environment(node_id=node_id, host=host, voters=voters, factor=factor, minimum=minimum)
            services[host] = {"hostname": host, "entrypoint": ["/bin/bash", "/opt/islet/kafka-node.sh"],
                              "volumes": [f"{NODE_SCRIPT}:/opt/islet/kafka-node.sh:ro"], "environment": environment}
        services["kafka-init"] = {"command": [f"topics --bootstrap-server kafka:9092 --create --replication-factor {init_factor} --topic t --partitions 3"]}
        services["token-registry"] = {"environment": {
            "ISLET_KAFKA_BOOTSTRAP": bootstrap or ",".join(f"{h}:9092" for h in self.HOSTS[:count]),
            "ISLET_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT", "ISLET_KAFKA_SASL_MECHANISMS": "SCRAM-SHA-512"}}
        return services

    def test_the_services_speak_the_listeners_protocol_and_mechanism(self):
        services = self.services()
        services["token-registry"]["environment"]["ISLET_KAFKA_SASL_MECHANISMS"] = "SCRAM-SHA-256"
        self.assertFails(services, "ISLET_KAFKA_SASL_MECHANISMS is SCRAM-SHA-256, the listener at kafka:9092 offers ['SCRAM-SHA-512']")
        services = self.services()
        del services["token-registry"]["environment"]["ISLET_KAFKA_SECURITY_PROTOCOL"]
        self.assertFails(services, "ISLET_KAFKA_SECURITY_PROTOCOL is PLAINTEXT, the listener at kafka:9092 is SASL_PLAINTEXT")

    def failures(self, services):
        report = check_compose.Report()
        output = io.StringIO()
        with contextlib.redirect_stdout(output):
            check_compose.check_kafka(report, services, REPO)
        return [line.strip() for line in output.getvalue().splitlines() if line.strip().startswith("FAIL")]

    def assertFails(self, services, fragment):
        found = self.failures(services)
        self.assertTrue(any(fragment in line for line in found), f"expected a failure with {fragment!r}, got {found}")

    def test_three_nodes_pass(self):
        self.assertEqual(self.failures(self.services()), [])

    def test_the_quorum(self):
        self.assertFails(self.services(voters="1@kafka:9093,2@kafka-2:9093", count=2, factor="2", minimum="1", init_factor="2"),
                         "2 voters")
        self.assertFails(self.services(voters="1@kafka:9093,2@kafka-2:9093,4@kafka-4:9093"), "names node 4, which no controller")
        self.assertFails(self.services(voters="1@kafka:9093,2@kafka-2:9094,3@kafka-3:9093"), "is not node 2's controller listener")
        self.assertFails(self.services(ids=[1, 2, 2]), "node ids repeat")

    def test_kafka_init_replicas(self):
        self.assertFails(self.services(init_factor="4"), "replication factor ['4'] and there are 3 broker(s)")
        # Fewer replicas than the nodes' min.insync.replicas: every acks=all write fails.
        self.assertFails(self.services(init_factor="1"), "min.insync.replicas is 2")
        self.assertFails(self.services(init_factor="2"), "min.insync.replicas is 2")

    def test_the_services_bootstrap(self):
        self.assertFails(self.services(bootstrap="kafka:9093,kafka-2:9092,kafka-3:9092"), "not a Kafka node's advertised internal listener")
        self.assertFails(self.services(bootstrap="broker:9092"), "not a Kafka node's advertised internal listener")
        self.assertFails(self.services(bootstrap="kafka:9092"), "it cannot start while those are down")


class SecureDefaults(unittest.TestCase):
    def services(self):
        return {
            "token-registry": {"environment": {
                "ISLET_TICKETS_REQUIRED": "true", "ISLET_TICKET_HS256_KEYS": "backend=k", "ISLET_GRPC_PORT": "9081",
                "ISLET_GRPC_KEYS": "content-service=K1:write,backend=K2:read+write,token-registry=K3:read",
                "ISLET_CONTENT_HTTP": "content-service:8083", "ISLET_CONTENT_HTTP_KEY": "K3"}},
            "content-service": {"environment": {
                "ISLET_GRPC_KEYS": "content-service=K1:write,token-registry=K3:read", "ISLET_REGISTRY_GRPC": "token-registry:9081",
                "ISLET_REGISTRY_GRPC_KEY": "K1", "ISLET_HTTP_PORT": "8083"}},
            "analytics-ingest": {"environment": {
                "ISLET_ANALYTICS_TRUSTED_PROXIES": "", "ISLET_ANALYTICS_CLIENT_HEADER": "", "ISLET_HTTP_MAX_CONNECTIONS_PER_ADDRESS": ""}},
        }

    def refused(self, services, fragment):
        with contextlib.redirect_stdout(io.StringIO()):
            found = check_compose.check_secure_defaults(check_compose.Report(), services)
        self.assertTrue(any(fragment in problem for problem in found), f"expected a problem with {fragment!r}, got {found}")

    def test_the_shipped_shape_passes(self):
        with contextlib.redirect_stdout(io.StringIO()):
            self.assertEqual(check_compose.check_secure_defaults(check_compose.Report(), self.services()), [])

    def test_tickets_not_required(self):
        services = self.services()
        services["token-registry"]["environment"]["ISLET_TICKETS_REQUIRED"] = ""
        self.refused(services, "ISLET_TICKETS_REQUIRED is '', not true")

    def test_freshness_monitor_not_wired(self):
        services = self.services()
        services["content-service"]["environment"]["ISLET_REGISTRY_GRPC"] = ""
        self.refused(services, "the freshness monitor cannot invalidate")

    def test_a_key_the_registry_does_not_take(self):
        services = self.services()
        services["content-service"]["environment"]["ISLET_REGISTRY_GRPC_KEY"] = "K2-other"
        self.refused(services, "not a key of token-registry's ISLET_GRPC_KEYS with write")
        services["token-registry"]["environment"]["ISLET_GRPC_KEYS"] = "content-service=K1:read"
        services["content-service"]["environment"]["ISLET_REGISTRY_GRPC_KEY"] = "K1"
        self.refused(services, "not a key of token-registry's ISLET_GRPC_KEYS with write")

    def test_registry_not_wired_to_content(self):
        services = self.services()
        services["token-registry"]["environment"]["ISLET_CONTENT_HTTP"] = "content:8083"
        self.refused(services, "an app cannot read the content")
        services = self.services()
        services["token-registry"]["environment"]["ISLET_CONTENT_HTTP_KEY"] = "K1"
        self.refused(services, "not a key of content-service's ISLET_GRPC_KEYS with read")
        services["token-registry"]["environment"]["ISLET_CONTENT_HTTP_KEY"] = ""
        self.refused(services, "ISLET_CONTENT_HTTP_KEY is empty")

    def test_proxies_not_configurable(self):
        services = self.services()
        del services["analytics-ingest"]["environment"]["ISLET_ANALYTICS_TRUSTED_PROXIES"]
        self.refused(services, "ISLET_ANALYTICS_TRUSTED_PROXIES is not passed")


if __name__ == "__main__":
    unittest.main(verbosity=1)
