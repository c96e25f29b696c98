#!/usr/bin/env python3
"""Checks docker-compose.yml against the code (run by scripts/check-compose.sh, which first validates
the file against the compose specification and normalizes it with a compose implementation).

  check_compose.py CONFIG.yml PACKAGE.json [--pending-products a,b]

CONFIG.yml is the normalized compose file (`podman-compose config`: interpolated, every profile);
PACKAGE.json is `swift package dump-package`. Checks:

  1. every service the file builds (build arg SERVICE) names an executable product of Package.swift;
  2. every ISLET_* variable a service sets is read by that product's code (its targets and the
     package targets they depend on): `config.string("islet.link.keys")` reads ISLET_LINK_KEYS,
     `environment["ISLET_LOG_LEVEL"]` reads ISLET_LOG_LEVEL;
  3. every topic of Shared/IsletMessages/IsletTopics.swift is created by kafka-init with its cleanup
     policy and retention, co-partitioned topics with one partition count, and no other topic;
  4. every built service has a health check and a restart policy, and a /run/secrets/NAME it names
     is a secret it mounts;
  5. the ACLs kafka-init grants agree with docs/topics.md's topic table: a topic's writers are
     exactly the users its "written by" cell names; its readers include every user its "read by"
     cell names, and no one else but its writers (a service reads back what it writes); every user
     that reads has a consumer-group ACL; every Islet service authenticates as its own user.

Products named with --pending-products (services from a branch not merged yet) are reported as
PENDING instead of failing; once they exist the script says the allowance can go.
"""
import json
import os
import re
import shlex
import subprocess
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TOPICS_SWIFT = os.path.join(REPO, "Shared", "IsletMessages", "IsletTopics.swift")
KAFKA_SECURITY_SWIFT = os.path.join(REPO, "Shared", "IsletKafka", "KafkaSecurity.swift")
TOPICS_DOC = os.path.join(REPO, "docs", "topics.md")

# IsletConfig's readers (Shared/IsletRuntime/IsletConfig.swift) take the dotted key first.
CONFIG_CALL = re.compile(r'\b(?:string|optionalString|int|bool|milliseconds|choice|properties)\(\s*"(islet\.[a-z0-9._-]+)"')
# Code that reads a variable by its environment name.
ENV_LITERAL = re.compile(r'environment\[\s*"(ISLET_[A-Z0-9_]+)"\s*\]')


def variable_name(key):
    """`islet.link.keys` → `ISLET_LINK_KEYS` (IsletConfig.variableName)."""
    return "_".join(key.split(".")).replace("-", "_").upper()


class Report:
    def __init__(self):
        self.failures = 0

    def ok(self, message):
        print(f"  ok       {message}")

    def fail(self, message):
        self.failures += 1
        print(f"  FAIL     {message}")

    def pending(self, message):
        print(f"  PENDING  {message}")

    def note(self, message):
        print(f"  note     {message}")


# ---- Package.swift --------------------------------------------------------------------------------

def load_package(path):
    with open(path) as f:
        package = json.load(f)
    products = {}
    for product in package["products"]:
        if "executable" in product["type"]:
            products[product["name"]] = product["targets"]
    targets = {}
    for target in package["targets"]:
        deps = []
        for dep in target.get("dependencies", []):
            # Local targets appear as byName or target; products of other packages are not scanned.
            for kind in ("byName", "target"):
                if kind in dep:
                    deps.append(dep[kind][0])
        targets[target["name"]] = {"path": target.get("path"), "deps": deps}
    return products, targets


def target_closure(names, targets):
    seen, stack = set(), list(names)
    while stack:
        name = stack.pop()
        if name in seen or name not in targets:
            continue
        seen.add(name)
        stack.extend(targets[name]["deps"])
    return seen


def kafka_security_variables():
    """ISLET_KAFKA_<PROPERTY> for each librdkafka security property KafkaSecurity passes through."""
    with open(KAFKA_SECURITY_SWIFT, encoding="utf-8") as f:
        text = f.read()
    listed = re.search(r"static let propertyNames = \[(.*?)\]", text, flags=re.S).group(1)
    return {"ISLET_KAFKA_" + name.replace(".", "_").upper() for name in re.findall(r'"([a-z0-9.]+)"', listed)}


def variables_read(paths):
    found = set()
    for path in paths:
        for root, _, files in os.walk(os.path.join(REPO, path)):
            for file in files:
                if not file.endswith(".swift"):
                    continue
                with open(os.path.join(root, file), encoding="utf-8") as f:
                    text = f.read()
                for key in CONFIG_CALL.findall(text):
                    if key == "islet.kafka.":
                        # `"islet.kafka." + name` over KafkaSecurity.propertyNames.
                        found.update(kafka_security_variables())
                    else:
                        found.add(variable_name(key))
                found.update(ENV_LITERAL.findall(text))
    return found


# ---- IsletTopics.swift ----------------------------------------------------------------------------

def seconds_of(expression, constants):
    """`day * 7`, `Duration.seconds(86_400)`, `.seconds(60)` → seconds, or None."""
    expression = expression.strip().replace("_", "")
    match = re.fullmatch(r"(?:Duration)?\.seconds\((\d+)\)", expression)
    if match:
        return int(match.group(1))
    match = re.fullmatch(r"(\w+)\s*\*\s*(\d+)", expression)
    if match and match.group(1) in constants:
        return constants[match.group(1)] * int(match.group(2))
    if expression in constants:
        return constants[expression]
    return None


def load_topics(report):
    with open(TOPICS_SWIFT, encoding="utf-8") as f:
        text = f.read()
    constants = {}
    for name, expression in re.findall(r"static let (\w+) = (Duration\.seconds\([\d_]+\))", text):
        constants[name] = seconds_of(expression, {})
    declared = {}
    for var, body in re.findall(r"static let (\w+) = IsletTopic\((.*?)\)\n", text, flags=re.S):
        fields = {}
        fields["name"] = re.search(r'name:\s*"([^"]+)"', body).group(1)
        fields["cleanup"] = re.search(r"cleanupPolicy:\s*\.(\w+)", body).group(1)
        retention = re.search(r"retention:\s*(.*?),\s*coPartitioned", body, flags=re.S).group(1).strip()
        if retention == "nil":
            fields["retention_ms"] = None
        else:
            seconds = seconds_of(retention, constants)
            if seconds is None:
                report.fail(f"IsletTopics.swift: cannot read the retention of {fields['name']} ({retention}); teach scripts/check_compose.py")
                continue
            fields["retention_ms"] = seconds * 1000
        fields["co_partitioned"] = re.search(r"coPartitioned:\s*(true|false)", body).group(1) == "true"
        declared[var] = fields
    listed = re.search(r"static let all: \[IsletTopic\] = \[([^\]]*)\]", text).group(1)
    names = [name.strip() for name in listed.split(",") if name.strip()]
    missing = [name for name in names if name not in declared]
    if missing:
        report.fail(f"IsletTopics.swift: IsletTopics.all names {missing}, which this script could not read")
    return [declared[name] for name in names if name in declared]


def created_topics(service):
    """The topics a kafka-init command creates: name → (partitions, {config: value})."""
    command = service.get("command")
    script = "\n".join(command) if isinstance(command, list) else (command or "")
    created = {}
    for line in script.splitlines():
        if "--create" not in line:
            continue
        words = shlex.split(line)
        topic, partitions, configs = None, None, {}
        for i, word in enumerate(words[:-1]):
            if word == "--topic":
                topic = words[i + 1]
            elif word == "--partitions":
                partitions = words[i + 1]
            elif word == "--config":
                key, _, value = words[i + 1].partition("=")
                configs[key] = value
        if topic:
            created[topic] = (partitions, configs)
    return created


# ---- Kafka's nodes ---------------------------------------------------------------------------------

def environment_of(service):
    environment = service.get("environment") or {}
    if isinstance(environment, list):
        environment = dict(item.split("=", 1) if "=" in item else (item, "") for item in environment)
    return {str(key): "" if value is None else str(value) for key, value in environment.items()}


def node_properties(name, service, base):
    """The server.properties a Kafka node of the file writes, read back by running what it runs with
    the environment the file gives it: a mounted script with `--print`, or the heredoc of its
    command. None for a service that is not a Kafka node."""
    words = []
    for key in ("entrypoint", "command"):
        value = service.get(key)
        words += value if isinstance(value, list) else ([value] if value else [])
    environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    environment.update(environment_of(service))
    for volume in service.get("volumes") or []:
        source, _, rest = str(volume).partition(":")
        target = rest.split(":")[0]
        if target and target in words and source.endswith(".sh"):
            path = source if os.path.isabs(source) else os.path.join(base, source)
            output = subprocess.run(["bash", path, "--print"], env=environment, capture_output=True, text=True)
            if output.returncode != 0:
                raise ValueError(f"{name}: {source} --print failed: {output.stderr.strip()}")
            return output.stdout
    script = "\n".join(str(word) for word in words)
    match = re.search(r"^[^\n]*<<PROPERTIES\n.*?^PROPERTIES$", script, flags=re.S | re.M)
    if not match:
        return None
    # The heredoc alone, into standard output (what `cat >"$config" <<PROPERTIES` wrote).
    heredoc = "cat " + match.group(0)[match.group(0).index("<<PROPERTIES"):]
    output = subprocess.run(["bash", "-c", heredoc], env=environment, capture_output=True, text=True)
    if output.returncode != 0:
        raise ValueError(f"{name}: its properties heredoc failed: {output.stderr.strip()}")
    return output.stdout


def parse_properties(text):
    properties = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, _, value = line.partition("=")
        properties[key.strip()] = value.strip()
    return properties


def parse_listeners(value):
    """`INTERNAL://:9092,EXTERNAL://localhost:9094` → [(name, host, port)]."""
    listeners = []
    for item in [part.strip() for part in (value or "").split(",") if part.strip()]:
        match = re.fullmatch(r"([A-Za-z0-9_]+)://\[?([^\]]*?)\]?:(\d+)", item)
        listeners.append((match.group(1), match.group(2), int(match.group(3))) if match else (item, None, None))
    return listeners


SECURITY_PROTOCOLS = {"PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"}
LOGIN_MODULES = {"PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
                 "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
                 "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"}


def jaas_options(value):
    return dict(re.findall(r'(\w+)="([^"]*)"', value or ""))


def check_node(report, name, properties, broker_count):
    """Kafka's start-up rules that apply to these properties; a message per broken one."""
    problems = []
    get = properties.get
    for key in ("node.id", "process.roles", "controller.listener.names", "listeners", "log.dirs"):
        if not get(key):
            problems.append(f"no {key}")
    if not (get("controller.quorum.voters") or get("controller.quorum.bootstrap.servers")):
        problems.append("neither controller.quorum.voters nor controller.quorum.bootstrap.servers")
    listeners = parse_listeners(get("listeners"))
    names = [listener[0] for listener in listeners]
    if len(set(names)) != len(names):
        problems.append(f"listeners repeats a name: {names}")
    ports = [listener[2] for listener in listeners if listener[2] is not None]
    if len(set(ports)) != len(ports):
        problems.append(f"listeners repeats a port: {ports}")
    protocol_map = dict(item.split(":", 1) for item in (get("listener.security.protocol.map") or "").split(",") if ":" in item)
    protocols = {}
    for listener in names:
        # With a map set, every listener needs its entry; without one, a name that is a protocol.
        protocol = protocol_map.get(listener) or (listener if listener in SECURITY_PROTOCOLS and not protocol_map else None)
        if protocol is None:
            problems.append(f"listener {listener} has no security protocol in listener.security.protocol.map")
        protocols[listener] = protocol
    for advertised in parse_listeners(get("advertised.listeners")):
        if advertised[0] not in names:
            problems.append(f"advertised.listeners names {advertised[0]}, which listeners does not")
    controllers = [item for item in (get("controller.listener.names") or "").split(",") if item]
    for controller in controllers:
        if controller not in names:
            problems.append(f"controller.listener.names names {controller}, which listeners does not")
    roles = set((get("process.roles") or "").split(","))
    inter_broker = get("inter.broker.listener.name") or ("PLAINTEXT" if "PLAINTEXT" in names else None)
    if "broker" in roles:
        if inter_broker not in names:
            problems.append(f"the inter-broker listener {inter_broker} is not among listeners")
        elif inter_broker in controllers:
            problems.append(f"the inter-broker listener {inter_broker} is a controller listener")
        elif get("advertised.listeners") and inter_broker not in [l[0] for l in parse_listeners(get("advertised.listeners"))]:
            problems.append(f"the inter-broker listener {inter_broker} is not among advertised.listeners: Kafka does not start")
    # SASL: each listener × mechanism it offers has its JAAS entry (else Kafka refuses to start:
    # "Could not find a 'KafkaServer' or '<listener>.KafkaServer' entry in the JAAS configuration").
    mechanisms_of = {}
    for listener in names:
        if not (protocols.get(listener) or "").startswith("SASL_"):
            continue
        lower = listener.lower()
        mechanisms = get(f"listener.name.{lower}.sasl.enabled.mechanisms") or get("sasl.enabled.mechanisms") or "GSSAPI"
        mechanisms_of[listener] = [m.strip() for m in mechanisms.split(",") if m.strip()]
        for mechanism in mechanisms_of[listener]:
            jaas = get(f"listener.name.{lower}.{mechanism.lower()}.sasl.jaas.config")
            if not jaas:
                problems.append(f"the SASL listener {listener} offers {mechanism} without a JAAS entry "
                                f"(listener.name.{lower}.{mechanism.lower()}.sasl.jaas.config): Kafka does not start")
            elif mechanism in LOGIN_MODULES and not jaas.startswith(LOGIN_MODULES[mechanism]):
                problems.append(f"listener.name.{lower}.{mechanism.lower()}.sasl.jaas.config is not {LOGIN_MODULES[mechanism]}")
    super_users = {user.strip() for user in (get("super.users") or "").split(";") if user.strip()}
    authorizer = bool(get("authorizer.class.name"))

    def client_user(listener, mechanism_key, role):
        mechanism = get(mechanism_key) or "GSSAPI"
        if mechanism not in mechanisms_of.get(listener, []):
            problems.append(f"{mechanism_key}={mechanism} is not offered by the {role} listener {listener} ({mechanisms_of.get(listener)})")
            return None
        options = jaas_options(get(f"listener.name.{listener.lower()}.{mechanism.lower()}.sasl.jaas.config"))
        user = options.get("username")
        if not user or "password" not in options:
            problems.append(f"the {role} listener {listener}'s {mechanism} JAAS entry names no username and password to connect with")
            return None
        if mechanism == "PLAIN" and options.get(f"user_{user}") != options.get("password"):
            problems.append(f"the {role} listener {listener}'s PLAIN JAAS entry does not accept its own user {user} (user_{user})")
        if mechanism.startswith("SCRAM") and role == "controller":
            problems.append(f"the controller listener {listener} uses {mechanism}: SCRAM credentials live in the metadata log the controllers serve")
        if authorizer and f"User:{user}" not in super_users:
            problems.append(f"the {role} listener's user {user} is not a super user: the nodes cannot act on the cluster")
        return user

    if "broker" in roles and inter_broker in mechanisms_of:
        client_user(inter_broker, "sasl.mechanism.inter.broker.protocol", "inter-broker")
    for controller in controllers:
        if controller in mechanisms_of:
            client_user(controller, "sasl.mechanism.controller.protocol", "controller")
    if authorizer:
        if "User:ANONYMOUS" in super_users:
            problems.append("User:ANONYMOUS is a super user: whoever reaches an unauthenticated listener may do anything")
        for listener in names:
            client_auth = get(f"listener.name.{listener.lower()}.ssl.client.auth") or get("ssl.client.auth") or "none"
            if protocols.get(listener) == "PLAINTEXT" or (protocols.get(listener) == "SSL" and client_auth != "required"):
                problems.append(f"listener {listener} is {protocols[listener]}: its clients are not authenticated")
        if get("allow.everyone.if.no.acl.found") == "true":
            problems.append("allow.everyone.if.no.acl.found=true: a topic without ACLs is open to everyone")
    # Replication: every factor at most the brokers there are; an acks=all write waits for fewer
    # replicas than there are (one may be lost), except with one broker.
    factors = {key: int(get(key) or default) for key, default in (
        ("offsets.topic.replication.factor", 3), ("transaction.state.log.replication.factor", 3), ("default.replication.factor", 1))}
    for key, factor in factors.items():
        if factor > broker_count:
            problems.append(f"{key}={factor} with {broker_count} broker(s)")
    minimum = int(get("min.insync.replicas") or 1)
    factor = factors["default.replication.factor"]
    if minimum > factor or (factor > 1 and minimum >= factor):
        problems.append(f"min.insync.replicas={minimum} with replication factor {factor}: losing one broker stops every acks=all write")
    if int(get("transaction.state.log.min.isr") or 2) > factors["transaction.state.log.replication.factor"]:
        problems.append("transaction.state.log.min.isr is larger than its replication factor")
    return problems


def check_kafka(report, services, base):
    """Each Kafka node's properties against Kafka's start-up rules, the nodes against each other, and
    kafka-init and the services against the nodes."""
    nodes = {}
    for name, service in sorted(services.items()):
        try:
            text = node_properties(name, service, base)
        except ValueError as error:
            report.fail(str(error))
            continue
        if text is not None:
            nodes[name] = (service, parse_properties(text))
    if not nodes:
        report.fail("no service writes Kafka node properties (a mounted script run with --print, or a <<PROPERTIES heredoc)")
        return
    brokers = [name for name, (_, p) in nodes.items() if "broker" in (p.get("process.roles") or "")]
    hosts = {}
    # What a client on the compose network reaches: each node's advertised inter-broker listener
    # (the services' listener), by its service name (and hostname).
    reachable = set()
    # A node's advertised internal listener → (its security protocol, the SASL mechanisms it offers).
    security = {}
    for name, (service, properties) in nodes.items():
        hosts[service.get("hostname") or name] = name
        hosts[name] = name
        inter = properties.get("inter.broker.listener.name")
        protocol_map = dict(item.split(":", 1) for item in (properties.get("listener.security.protocol.map") or "").split(",") if ":" in item)
        for listener, host, port in parse_listeners(properties.get("advertised.listeners")):
            if listener == inter and host in (name, service.get("hostname")):
                reachable.update({f"{name}:{port}", f"{service.get('hostname') or name}:{port}"})
                mechanisms = properties.get(f"listener.name.{listener.lower()}.sasl.enabled.mechanisms") or properties.get("sasl.enabled.mechanisms") or ""
                security[f"{name}:{port}"] = security[f"{service.get('hostname') or name}:{port}"] = (
                    protocol_map.get(listener, listener), {m.strip() for m in mechanisms.split(",") if m.strip()})
        problems = check_node(report, name, properties, len(brokers))
        if problems:
            for problem in problems:
                report.fail(f"{name}: {problem}")
        else:
            report.ok(f"{name}: node {properties.get('node.id')}, listeners, SASL and JAAS, super users, replication agree with Kafka's rules")
    ids = [p.get("node.id") for _, p in nodes.values()]
    if len(set(ids)) != len(ids):
        report.fail(f"node ids repeat: {ids}")
    voters = {p.get("controller.quorum.voters") for _, p in nodes.values()}
    if len(voters) != 1:
        report.fail(f"the nodes disagree on controller.quorum.voters: {sorted(map(str, voters))}")
    else:
        listed = [voter for voter in voters.pop().split(",") if voter]
        controllers = {p.get("node.id"): (service.get("hostname") or name, p) for name, (service, p) in nodes.items()
                       if "controller" in (p.get("process.roles") or "")}
        seen = set()
        for voter in listed:
            match = re.fullmatch(r"(\d+)@([^:]+):(\d+)", voter)
            if not match:
                report.fail(f"controller.quorum.voters: {voter!r} is not id@host:port")
                continue
            node_id, host, port = match.groups()
            seen.add(node_id)
            if node_id not in controllers:
                report.fail(f"controller.quorum.voters names node {node_id}, which no controller of the file is")
                continue
            hostname, properties = controllers[node_id]
            controller_ports = [l[2] for l in parse_listeners(properties.get("listeners")) if l[0] in (properties.get("controller.listener.names") or "").split(",")]
            if host != hostname or int(port) not in controller_ports:
                report.fail(f"controller.quorum.voters: {voter} is not node {node_id}'s controller listener ({hostname}:{controller_ports})")
        if set(controllers) - seen:
            report.fail(f"controllers {sorted(set(controllers) - seen)} are not in controller.quorum.voters")
        elif len(listed) in (2, 4):
            report.fail(f"{len(listed)} voters: a quorum that survives no more failures than one node fewer")
        else:
            report.ok(f"{len(brokers)} broker(s), {len(listed)} controller(s) in one quorum")
    # kafka-init: replicas it asks for exist; it talks to a node.
    init = services.get("kafka-init")
    if init is not None:
        command = init.get("command")
        script = "\n".join(command) if isinstance(command, list) else (command or "")
        environment = environment_of(init)
        factors = set()
        for value in re.findall(r"--replication-factor\s+(\S+)", script):
            value = value.strip('"')
            value = re.sub(r"\$\{?(\w+)\}?", lambda m: environment.get(m.group(1), m.group(0)), value)
            factors.add(value)
        bad = [f for f in factors if not f.isdigit() or int(f) > len(brokers) or int(f) < 1]
        minimum = max(int(p.get("min.insync.replicas") or 1) for _, p in nodes.values())
        if bad:
            report.fail(f"kafka-init creates topics with replication factor {sorted(factors)} and there are {len(brokers)} broker(s)")
        elif any(int(f) < minimum or (len(brokers) > 1 and int(f) <= minimum) for f in factors):
            report.fail(f"kafka-init creates topics with replication factor {sorted(factors)}, the nodes' min.insync.replicas is {minimum}: "
                        "acks=all writes fail (NOT_ENOUGH_REPLICAS), or stop when one broker does")
        else:
            report.ok(f"kafka-init: replication factor {sorted(factors)} of {len(brokers)} broker(s), min.insync.replicas {minimum}")
        for host in re.findall(r"--bootstrap-server\s+([\w.-]+):\d+", script):
            if host not in hosts:
                report.fail(f"kafka-init talks to {host}, which is not a Kafka node of the file")
    # The services reach the nodes, all of them when there are several.
    failures = report.failures
    for name, service in sorted(services.items()):
        bootstrap = environment_of(service).get("ISLET_KAFKA_BOOTSTRAP")
        if not bootstrap:
            continue
        entries = [item.strip() for item in bootstrap.split(",") if item.strip()]
        listed = [item.rsplit(":", 1)[0] for item in entries]
        unknown = [entry for entry in entries if entry not in reachable]
        if unknown:
            report.fail(f"{name}: ISLET_KAFKA_BOOTSTRAP names {unknown}, not a Kafka node's advertised internal listener {sorted(reachable)}")
        elif len(nodes) > 1 and {hosts[h] for h in listed} != set(nodes):
            report.fail(f"{name}: ISLET_KAFKA_BOOTSTRAP lists {listed} of the nodes {sorted(nodes)}: it cannot start while those are down")
        else:
            # It speaks the listener's protocol, with a mechanism the listener offers.
            environment = environment_of(service)
            protocol = environment.get("ISLET_KAFKA_SECURITY_PROTOCOL") or "PLAINTEXT"
            mechanism = environment.get("ISLET_KAFKA_SASL_MECHANISMS") or "GSSAPI"
            for entry in entries:
                expected, offered = security.get(entry, (None, set()))
                if expected and protocol.upper() != expected.upper():
                    report.fail(f"{name}: ISLET_KAFKA_SECURITY_PROTOCOL is {protocol}, the listener at {entry} is {expected}")
                elif expected and expected.upper().startswith("SASL") and mechanism.upper() not in {m.upper() for m in offered}:
                    report.fail(f"{name}: ISLET_KAFKA_SASL_MECHANISMS is {mechanism}, the listener at {entry} offers {sorted(offered)}")
    if report.failures == failures:
        report.ok(f"every service's ISLET_KAFKA_BOOTSTRAP names the file's Kafka nodes ({', '.join(sorted(nodes))}), "
                  "with the listener's security protocol and a SASL mechanism it offers")


# ---- ACLs ----------------------------------------------------------------------------------------

# Who a cell of docs/topics.md's topic table names → the Kafka users of the compose file.
SERVICES = ["token-registry", "content-service", "apns-dispatcher", "analytics-ingest", "analytics-consumer"]
CONSUMERS = ["token-registry", "content-service", "apns-dispatcher", "analytics-consumer"]


def users_named(cell):
    users = {service for service in SERVICES if service in cell}
    if "backend teams" in cell:
        users.add("backend")
    if "analytics teams" in cell:
        users.add("analytics-consumer")  # the example analytics consumer
    if "every Islet consumer" in cell:
        users.update(CONSUMERS)
    return users  # "operators": the admin user, a super user with no ACLs


def documented_access(report):
    """topic → (writers, readers) from docs/topics.md's topic table."""
    with open(TOPICS_DOC, encoding="utf-8") as f:
        lines = f.read().splitlines()
    access = {}
    for line in lines:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) == 6 and cells[0].startswith("`islet."):
            access[cells[0].strip("`")] = (users_named(cells[3]), users_named(cells[4]))
    if not access:
        report.fail("docs/topics.md: no topic table found (| topic | key | cleanup | written by | read by | message |)")
    return access


def granted_acls(service):
    """(user, operation, resource type, name) for each `kafka-acls.sh … --add` of a kafka-init command."""
    command = service.get("command")
    script = "\n".join(command) if isinstance(command, list) else (command or "")
    grants = set()
    for line in script.splitlines():
        if "--allow-principal" not in line:
            continue
        words = shlex.split(line.replace("$acls", "").replace("$$acls", ""))
        values = {words[i]: words[i + 1] for i in range(len(words) - 1) if words[i].startswith("--")}
        user = values.get("--allow-principal", "").removeprefix("User:")
        operation = values.get("--operation")
        if "--topic" in values:
            grants.add((user, operation, "topic", values["--topic"]))
        elif "--group" in values:
            grants.add((user, operation, "group", values["--group"]))
    return grants


def check_acls(report, services):
    init = services.get("kafka-init") or {}
    grants = granted_acls(init)
    documented = documented_access(report)
    if not grants:
        report.fail("kafka-init grants no ACL (kafka-acls.sh --add --allow-principal …)")
        return
    for topic, (writers, readers) in sorted(documented.items()):
        granted_writers = {u for (u, op, kind, name) in grants if kind == "topic" and name == topic and op == "Write"}
        granted_readers = {u for (u, op, kind, name) in grants if kind == "topic" and name == topic and op == "Read"}
        problems = []
        if granted_writers != writers:
            problems.append(f"writers {sorted(granted_writers)}, the table says {sorted(writers)}")
        if not readers <= granted_readers:
            problems.append(f"readers the table names without a Read ACL: {sorted(readers - granted_readers)}")
        if not granted_readers <= readers | writers:
            problems.append(f"Read granted to {sorted(granted_readers - readers - writers)}, whom the table does not name")
        if problems:
            report.fail(f"ACLs of {topic}: " + "; ".join(problems))
        else:
            report.ok(f"ACLs of {topic}: written by {sorted(writers)}, read by {sorted(granted_readers)}")
    for extra in sorted({name for (_, _, kind, name) in grants if kind == "topic"} - set(documented)):
        report.fail(f"ACL on {extra}, which docs/topics.md's table does not list")
    readers = {u for (u, op, kind, _) in grants if kind == "topic" and op == "Read"}
    group_users = {u for (u, op, kind, _) in grants if kind == "group" and op == "Read"}
    # A replica (no group) needs none: only the users that consume in a group.
    for user in sorted((readers & set(CONSUMERS + ["backend"])) - group_users):
        report.fail(f"{user} reads topics but has no consumer-group ACL")
    for name in SERVICES:
        environment = environment_of(services.get(name) or {})
        if environment.get("ISLET_KAFKA_SASL_USERNAME") != name or not environment.get("ISLET_KAFKA_SASL_PASSWORD"):
            report.fail(f"{name}: does not authenticate to Kafka as user {name} (ISLET_KAFKA_SASL_USERNAME/PASSWORD)")
        else:
            report.ok(f"{name}: authenticates as Kafka user {name} ({environment.get('ISLET_KAFKA_SASL_MECHANISMS')})")


# ---- the checks -----------------------------------------------------------------------------------

def check_secure_defaults(report, services):
    """What the file gives the services when .env sets nothing optional: the protections on."""
    problems = []
    registry = environment_of(services.get("token-registry") or {})
    content = environment_of(services.get("content-service") or {})
    ingest = environment_of(services.get("analytics-ingest") or {})
    if str(registry.get("ISLET_TICKETS_REQUIRED", "")).lower() != "true":
        problems.append(f"token-registry: ISLET_TICKETS_REQUIRED is {registry.get('ISLET_TICKETS_REQUIRED')!r}, not true: "
                        "anyone may register a token for an activity id until its owner does")
    for name, environment, variable in [
        ("token-registry", registry, "ISLET_TICKET_HS256_KEYS"), ("token-registry", registry, "ISLET_GRPC_KEYS"),
        ("content-service", content, "ISLET_GRPC_KEYS"), ("content-service", content, "ISLET_REGISTRY_GRPC_KEY"),
        ("token-registry", registry, "ISLET_CONTENT_HTTP_KEY"),
    ]:
        if not environment.get(variable):
            problems.append(f"{name}: {variable} is empty")
    grpc_port = str(registry.get("ISLET_GRPC_PORT", ""))
    if str(content.get("ISLET_REGISTRY_GRPC", "")) != f"token-registry:{grpc_port}":
        problems.append(f"content-service: ISLET_REGISTRY_GRPC is {content.get('ISLET_REGISTRY_GRPC')!r}, not token-registry:{grpc_port}: "
                        "the freshness monitor cannot invalidate the token of an activity it ends")
    def keys_with(environment, permission):
        keys = set()
        for entry in str(environment.get("ISLET_GRPC_KEYS", "")).split(","):
            name, _, rest = entry.partition("=")
            key, _, permissions = rest.rpartition(":")
            if permission in permissions.split("+"):
                keys.add(key)
        return keys
    if content.get("ISLET_REGISTRY_GRPC_KEY") and content.get("ISLET_REGISTRY_GRPC_KEY") not in keys_with(registry, "write"):
        problems.append("content-service: ISLET_REGISTRY_GRPC_KEY is not a key of token-registry's ISLET_GRPC_KEYS with write")
    content_http = f"content-service:{content.get('ISLET_HTTP_PORT', '')}"
    if str(registry.get("ISLET_CONTENT_HTTP", "")) != content_http:
        problems.append(f"token-registry: ISLET_CONTENT_HTTP is {registry.get('ISLET_CONTENT_HTTP')!r}, not {content_http}: "
                        "an app cannot read the content of the activity its backend announced")
    if registry.get("ISLET_CONTENT_HTTP_KEY") and registry.get("ISLET_CONTENT_HTTP_KEY") not in keys_with(content, "read"):
        problems.append("token-registry: ISLET_CONTENT_HTTP_KEY is not a key of content-service's ISLET_GRPC_KEYS with read")
    for variable in ("ISLET_ANALYTICS_TRUSTED_PROXIES", "ISLET_ANALYTICS_CLIENT_HEADER", "ISLET_HTTP_MAX_CONNECTIONS_PER_ADDRESS"):
        if variable not in ingest:
            problems.append(f"analytics-ingest: {variable} is not passed (behind a load balancer every phone would share one rate limit)")
    for problem in problems:
        report.fail(problem)
    if not problems:
        report.ok("tickets required, the freshness monitor wired to token-registry and token-registry to content-service with keys they accept, "
                  "analytics-ingest's proxies configurable")
    return problems


def built_product(service):
    build = service.get("build")
    if not isinstance(build, dict):
        return None
    args = build.get("args") or {}
    if isinstance(args, list):
        args = dict(arg.split("=", 1) for arg in args if "=" in arg)
    return args.get("SERVICE")


def main():
    args = sys.argv[1:]
    pending = set()
    if "--pending-products" in args:
        i = args.index("--pending-products")
        pending = {name for name in args[i + 1].split(",") if name}
        del args[i:i + 2]
    base = REPO
    if "--base" in args:
        i = args.index("--base")
        base = args[i + 1]
        del args[i:i + 2]
    config_path, package_path = args
    with open(config_path) as f:
        config = yaml.safe_load(f)
    services = config.get("services") or {}
    products, targets = load_package(package_path)
    report = Report()

    print("products: every service built from the Dockerfile is an executable of Package.swift")
    built = {name: built_product(service) for name, service in services.items() if built_product(service)}
    for name, product in sorted(built.items()):
        if product in products:
            report.ok(f"{name}: product {product}")
            if product in pending:
                report.note(f"{product} is in Package.swift now: drop it from the pending products (scripts/test.sh)")
        elif product in pending:
            report.pending(f"{name}: product {product} is not in Package.swift yet (pending the analytics merge)")
        else:
            report.fail(f"{name}: product {product} is not an executable product of Package.swift")

    print("variables: every ISLET_* variable a service sets is read by its code")
    everything = variables_read(["Services", "Shared"])
    for name, service in sorted(services.items()):
        environment = environment_of(service)
        names = sorted(variable for variable in environment if variable.startswith("ISLET_"))
        if not names:
            continue
        product = built.get(name)
        if product in products:
            closure = target_closure(products[product], targets)
            read = variables_read(sorted({targets[t]["path"] for t in closure if targets[t]["path"]}))
            scope = f"{product}'s targets"
        else:
            read = everything
            scope = "any target (product not in Package.swift yet)"
        unread = [variable for variable in names if variable not in read]
        if unread:
            report.fail(f"{name}: {', '.join(unread)} not read by {scope}")
        else:
            report.ok(f"{name}: {len(names)} variables, all read by {scope}")
        if product in products:
            unset = sorted(read - set(environment))
            if unset:
                report.note(f"{name}: its code can read {', '.join(unset)}, which the file does not set (the service's default applies)")

    print("topics: kafka-init creates every topic of IsletTopics.swift as declared")
    topics = load_topics(report)
    init = services.get("kafka-init")
    if init is None:
        report.fail("there is no kafka-init service")
        created = {}
    else:
        created = created_topics(init)
    co_partition_counts = set()
    for topic in topics:
        name = topic["name"]
        if name not in created:
            report.fail(f"{name}: not created by kafka-init")
            continue
        partitions, configs = created[name]
        problems = []
        if not (partitions or "").isdigit() or int(partitions) < 1:
            problems.append(f"partitions {partitions!r} is not a positive number")
        if configs.get("cleanup.policy") != topic["cleanup"]:
            problems.append(f"cleanup.policy {configs.get('cleanup.policy')!r}, IsletTopics.swift says {topic['cleanup']!r}")
        expected_retention = None if topic["retention_ms"] is None else str(topic["retention_ms"])
        if configs.get("retention.ms") != expected_retention:
            problems.append(f"retention.ms {configs.get('retention.ms')!r}, IsletTopics.swift says {expected_retention!r}")
        if topic["co_partitioned"]:
            co_partition_counts.add(partitions)
        if problems:
            report.fail(f"{name}: " + "; ".join(problems))
        else:
            retention = "compacted" if expected_retention is None else f"retention.ms={expected_retention}"
            report.ok(f"{name}: {partitions} partitions, cleanup.policy={topic['cleanup']}, {retention}")
    if len(co_partition_counts) > 1:
        report.fail(f"co-partitioned topics have different partition counts: {sorted(co_partition_counts)}")
    elif co_partition_counts:
        report.ok(f"co-partitioned topics share {co_partition_counts.pop()} partitions")
    for extra in sorted(set(created) - {topic["name"] for topic in topics}):
        report.fail(f"{extra}: created by kafka-init but not a topic of IsletTopics.swift")

    print("kafka: each node's properties against Kafka's start-up rules; the nodes, kafka-init and the services against each other")
    check_kafka(report, services, base)
    co_partitioned = {topic["name"] for topic in topics if topic["co_partitioned"]}
    if init is not None:
        command = init.get("command")
        script = "\n".join(command) if isinstance(command, list) else (command or "")
        loop = re.search(r"for topic in ([^;\n]+); do", script)
        checked = set(loop.group(1).split()) if loop else set()
        if checked != co_partitioned:
            report.fail(f"kafka-init checks the partition counts of {sorted(checked)}; the co-partitioned topics are {sorted(co_partitioned)}")
        else:
            report.ok(f"kafka-init checks that the {len(checked)} co-partitioned topics agree")

    print("ACLs: kafka-init grants what docs/topics.md's topic table says, and each service is its own user")
    check_acls(report, services)

    print("secure defaults: what the services get when .env sets nothing optional")
    check_secure_defaults(report, services)

    print("operations: health checks, restart policies, secrets")
    for name, service in sorted(services.items()):
        if name not in built and name != "kafka":
            continue
        missing = [key for key in ("healthcheck", "restart") if key not in service]
        secrets = set()
        for secret in service.get("secrets") or []:
            secrets.add(secret if isinstance(secret, str) else secret.get("target") or secret.get("source"))
        environment = service.get("environment") or {}
        values = environment.values() if isinstance(environment, dict) else environment
        named = set()
        for value in values:
            named.update(re.findall(r"/run/secrets/([A-Za-z0-9._-]+)", str(value)))
        unmounted = sorted(named - secrets)
        if missing or unmounted:
            report.fail(f"{name}: " + "; ".join(
                [f"no {key}" for key in missing] + [f"names /run/secrets/{s} but does not mount it" for s in unmounted]))
        else:
            report.ok(f"{name}: health check, restart {service['restart']}" + (f", secrets {sorted(secrets)}" if secrets else ""))

    if report.failures:
        print(f"check-compose: {report.failures} problem(s)")
        return 1
    print("check-compose: docker-compose.yml agrees with the code")
    return 0


if __name__ == "__main__":
    sys.exit(main())
