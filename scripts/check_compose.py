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
  3. every topic of Shared/IsletMessages/Topics.swift is created by kafka-init with its cleanup
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
import sys

import yaml

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
TOPICS_SWIFT = os.path.join(REPO, "Shared", "IsletMessages", "Topics.swift")
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


# ---- Topics.swift ---------------------------------------------------------------------------------

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
                report.fail(f"Topics.swift: cannot read the retention of {fields['name']} ({retention}); teach scripts/check_compose.py")
                continue
            fields["retention_ms"] = seconds * 1000
        fields["co_partitioned"] = re.search(r"coPartitioned:\s*(true|false)", body).group(1) == "true"
        declared[var] = fields
    listed = re.search(r"static let all: \[IsletTopic\] = \[([^\]]*)\]", text).group(1)
    names = [name.strip() for name in listed.split(",") if name.strip()]
    missing = [name for name in names if name not in declared]
    if missing:
        report.fail(f"Topics.swift: IsletTopics.all names {missing}, which this script could not read")
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
        environment = (services.get(name) or {}).get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) if "=" in item else (item, "") for item in environment)
        if environment.get("ISLET_KAFKA_SASL_USERNAME") != name or not environment.get("ISLET_KAFKA_SASL_PASSWORD"):
            report.fail(f"{name}: does not authenticate to Kafka as user {name} (ISLET_KAFKA_SASL_USERNAME/PASSWORD)")
        else:
            report.ok(f"{name}: authenticates as Kafka user {name} ({environment.get('ISLET_KAFKA_SASL_MECHANISMS')})")


# ---- the checks -----------------------------------------------------------------------------------

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
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) if "=" in item else (item, "") for item in environment)
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

    print("topics: kafka-init creates every topic of Topics.swift as declared")
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
            problems.append(f"cleanup.policy {configs.get('cleanup.policy')!r}, Topics.swift says {topic['cleanup']!r}")
        expected_retention = None if topic["retention_ms"] is None else str(topic["retention_ms"])
        if configs.get("retention.ms") != expected_retention:
            problems.append(f"retention.ms {configs.get('retention.ms')!r}, Topics.swift says {expected_retention!r}")
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
        report.fail(f"{extra}: created by kafka-init but not a topic of Topics.swift")

    print("ACLs: kafka-init grants what docs/topics.md's topic table says, and each service is its own user")
    check_acls(report, services)

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
