#!/usr/bin/env python3
"""Starts every Islet service of a normalized compose file as a local process with exactly the
environment, secrets and command compose gives its container, and waits for each one's health
check (run by scripts/check-compose.sh for the file alone and with docker-compose.ha.yml).

  compose_start.py CONFIG.yml --bin DIR --bootstrap HOST:PORT --run-dir DIR [--play]
  compose_start.py CONFIG.yml --bin DIR --bootstrap HOST:PORT --run-dir DIR --refused-logins
  compose_start.py CONFIG.yml --bin DIR --bootstrap HOST:PORT --run-dir DIR --self-test

CONFIG.yml is `podman-compose config` of the file, interpolated with an .env that
scripts/new-env.sh --dev wrote (every profile). What differs from a container, each printed:

  - host names: a compose service's `name:port` becomes 127.0.0.1 and the port that service's
    process listens on here; every Kafka node becomes the local broker (--bootstrap);
  - ports: each port a service listens on (its ISLET_*_PORT values) is a free loopback port here,
    and a 0.0.0.0 host is 127.0.0.1; the health check's URL follows;
  - paths: /run/secrets/NAME is the secret's file, a named volume's mount point is a directory of
    --run-dir shared by the services that mount it, a path the image holds (ISLET_TEMPLATES_DIR's
    /etc/islet/templates, from the Dockerfile) is its source in the repository;
  - Kafka security: the local broker (tansu 0.6) cannot authenticate SCRAM users
    (docs/operations.md), so ISLET_KAFKA_SECURITY_PROTOCOL and ISLET_KAFKA_SASL_* are left out
    after checking that each service names its own Kafka user and the kafka service's password of
    that user.

Anything else is as compose would pass it: a variable compose sets wrongly, a secret that does not
exist or a key compose does not pass stops the service, and the check fails with the service's
own words. --refused-logins keeps the SASL settings, against a broker that refuses every login
(tansu --authentication): each Kafka client logs in with the file's mechanism and user, and its
/health/ready must say that Kafka refused the login. --play then runs the demo's scenarios (islet-demo play) against the services, with the
keys of the file: what a first `docker compose up` of the dev profile is for. --self-test breaks the file
one thing at a time (a required key not passed, the secret's file missing, a listener others reach
bound to its container's loopback) and shows that the check then fails, naming the cause in the
service's own words.
"""
import argparse
import contextlib
import copy
import io
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_compose  # noqa: E402  (its reading of a normalized file's services)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
# What the image holds at a path a service is told about: the Dockerfile's build stage copies the
# source into /out/templates, the runtime stage copies that to /etc/islet/templates.
IMAGE_PATHS = {"/etc/islet/templates": "Services/ContentService/Templates"}
DOCKERFILE_PROOF = ["cp Services/ContentService/Templates/*.yaml /out/templates/", "COPY --from=build /out/templates/ /etc/islet/templates/"]
# A compose service's `host:port` inside a variable's value (not part of a longer name or address).
HOST_PORT = re.compile(r"(?<![\w.-])([a-z][a-z0-9-]*):(\d{2,5})\b")
KAFKA_SECURITY = re.compile(r"^ISLET_KAFKA_(SECURITY_PROTOCOL|SASL_[A-Z_]+)$")
READY_SECONDS = 90


class PortPicker:
    """Free loopback ports, each one different: every socket that found one is held until all are
    picked (a port given back at once could be given out again)."""

    def __init__(self):
        self.held = []

    def pick(self):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        self.held.append(s)
        return s.getsockname()[1]

    def release(self):
        for s in self.held:
            s.close()
        self.held = []


def say(message):
    print(f"  {message}", flush=True)


class Failure(Exception):
    pass


def product(service):
    return check_compose.built_product(service)


def kafka_nodes(services):
    """The services that are Kafka nodes: not built here, they run deploy/kafka-node.sh."""
    return {name for name, s in services.items() if not product(s) and "KAFKA_NODE_ID" in (s.get("environment") or {})}


def start_order(names, services):
    order, seen = [], set()

    def visit(name):
        if name in seen or name not in names:
            return
        seen.add(name)
        for dependency in (services[name].get("depends_on") or {}):
            visit(dependency)
        order.append(name)

    for name in sorted(names):
        visit(name)
    return order


class Plan:
    """Each service's process: its command, environment and health URL, after the substitutions."""

    def __init__(self, config, bin_dir, bootstrap, run_dir):
        self.config = config
        self.services = config["services"]
        self.islet = {name for name, s in self.services.items() if product(s)}
        self.kafka = kafka_nodes(self.services)
        self.bootstrap = bootstrap
        self.bin_dir = os.path.abspath(bin_dir)
        self.run_dir = run_dir
        # (service, container port) → the local port.
        self.ports = {}
        picker = PortPicker()
        for name in self.islet:
            for key, value in (self.services[name].get("environment") or {}).items():
                if key.endswith("_PORT") and str(value).isdigit() and int(value) > 0:
                    self.ports[(name, int(value))] = picker.pick()
            command = self.services[name].get("command") or []
            for option, value in zip(command, command[1:]):
                if option == "--port" and value.isdigit():
                    self.ports[(name, int(value))] = picker.pick()
        picker.release()
        self.hosts = {}
        for name in self.islet:
            self.hosts[name] = name
            if self.services[name].get("hostname"):
                self.hosts[self.services[name]["hostname"]] = name
        # Named volumes start empty, as a first `docker compose up` has them.
        shutil.rmtree(os.path.join(run_dir, "volumes"), ignore_errors=True)
        for name in self.islet:
            for volume in self.services[name].get("volumes") or []:
                source = volume.split(":")[0] if isinstance(volume, str) else volume["source"]
                if not (source.startswith("/") or source.startswith(".")):
                    os.makedirs(os.path.join(run_dir, "volumes", source), exist_ok=True)
        self.kafka_hosts = set(self.kafka) | {self.services[n].get("hostname") for n in self.kafka if self.services[n].get("hostname")}

    def command_of(self, name):
        return [str(part) for part in (self.services[name].get("command") or [])]

    def address(self, owner, host, port):
        """A compose `host:port` as it is reached here."""
        if host in self.kafka_hosts:
            return self.bootstrap
        service = self.hosts.get(host)
        if service is None:
            return None
        local = self.ports.get((service, port))
        if local is None:
            raise Failure(f"{owner} is given {host}:{port}, but {service} listens on no port {port} "
                          f"(its ports: {sorted(p for s, p in self.ports if s == service)})")
        return f"127.0.0.1:{local}"

    def paths(self, name):
        """Container path → local path, for the service's secrets, volumes and image paths."""
        mapped = {}
        secrets = self.config.get("secrets") or {}
        for secret in self.services[name].get("secrets") or []:
            source = secret["source"] if isinstance(secret, dict) else secret
            target = (secret.get("target") if isinstance(secret, dict) else None) or source
            path = target if target.startswith("/") else f"/run/secrets/{target}"
            file = (secrets.get(source) or {}).get("file")
            if not file:
                raise Failure(f"{name} mounts secret {source}, which the file does not define")
            mapped[path] = file
        for volume in self.services[name].get("volumes") or []:
            parts = volume.split(":") if isinstance(volume, str) else [volume["source"], volume["target"]]
            source, target = parts[0], parts[1]
            if source.startswith("/") or source.startswith("."):
                mapped[target] = os.path.abspath(os.path.join(REPO, source))
            else:
                mapped[target] = os.path.join(self.run_dir, "volumes", source)
        for path, source in IMAGE_PATHS.items():
            mapped.setdefault(path, os.path.join(REPO, source))
        return mapped

    def environment(self, name):
        """The service's environment here, and the substitutions made, for the log."""
        given = {k: "" if v is None else str(v) for k, v in (self.services[name].get("environment") or {}).items()}
        paths = self.paths(name)
        env, changes = {}, []
        security = sorted(key for key in given if KAFKA_SECURITY.match(key))
        if security:
            changes.append(f"{', '.join(security)} left out (the local broker cannot authenticate SCRAM users)")
        for key, value in given.items():
            if KAFKA_SECURITY.match(key):
                continue
            new = value
            if key.endswith("_HOST") and value == "0.0.0.0":
                new = "127.0.0.1"
            elif key.endswith("_PORT") and value.isdigit() and (name, int(value)) in self.ports:
                new = str(self.ports[(name, int(value))])
            else:
                def host_port(match):
                    replaced = self.address(f"{name}'s {key}", match.group(1), int(match.group(2)))
                    return replaced if replaced else match.group(0)
                new = HOST_PORT.sub(host_port, new)
                if key == "ISLET_KAFKA_BOOTSTRAP":
                    new = ",".join(dict.fromkeys(new.split(",")))
                for container, local in sorted(paths.items(), key=lambda item: -len(item[0])):
                    new = new.replace(container, local)
            if new != value:
                changes.append(f"{key}: {value} → {new}")
            env[key] = new
        env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
        if os.environ.get("LD_LIBRARY_PATH"):
            env["LD_LIBRARY_PATH"] = os.environ["LD_LIBRARY_PATH"]
        return env, changes

    def command(self, name):
        """The executable and its arguments, ports in --port options mapped."""
        command = self.command_of(name)
        for i in range(1, len(command)):
            if command[i - 1] == "--port" and command[i].isdigit():
                command[i] = str(self.ports[(name, int(command[i]))])
            if command[i - 1] == "--host" and command[i] == "0.0.0.0":
                command[i] = "127.0.0.1"
        return [os.path.join(self.bin_dir, product(self.services[name]))] + command

    def reachable_listeners(self):
        """(service, container port) pairs something outside the container reaches: another
        service's `host:port`, or a published port."""
        reached = set()
        for name, service in self.services.items():
            for value in (service.get("environment") or {}).values():
                for host, port in HOST_PORT.findall(str(value)):
                    if host in self.hosts:
                        reached.add((self.hosts[host], int(port)))
        for name in self.islet:
            for entry in self.services[name].get("ports") or []:
                target = entry.get("target") if isinstance(entry, dict) else str(entry).rsplit(":", 1)[-1].split("/")[0]
                if str(target).isdigit():
                    reached.add((name, int(target)))
        return reached

    def check_listen_addresses(self):
        """A listener others reach must listen on the container's interfaces, not its loopback."""
        reached = self.reachable_listeners()
        for name in sorted(self.islet):
            env = {k: str(v) for k, v in (self.services[name].get("environment") or {}).items()}
            for key, value in env.items():
                if not key.endswith("_HOST") or value not in ("127.0.0.1", "localhost", "::1"):
                    continue
                port = env.get(key[: -len("_HOST")] + "_PORT", "")
                if port.isdigit() and (name, int(port)) in reached:
                    raise Failure(f"{name} listens on {value}:{port} ({key}), which only its own container reaches, "
                                  f"but port {port} is published or named by another service")

    def health_url(self, name):
        test = (self.services[name].get("healthcheck") or {}).get("test") or []
        urls = [part for part in test if isinstance(part, str) and part.startswith("http")]
        if not urls:
            raise Failure(f"{name} has no HTTP health check to wait for")
        match = re.match(r"http://(127\.0\.0\.1|localhost):(\d+)(/.*)", urls[0])
        if not match or (name, int(match.group(2))) not in self.ports:
            raise Failure(f"{name}'s health check {urls[0]} is not on a port it listens on")
        return f"http://127.0.0.1:{self.ports[(name, int(match.group(2)))]}{match.group(3)}"


def check_kafka_users(plan):
    """Each service authenticates as its own user, with the password the kafka nodes create it with."""
    node_env = {}
    for node in plan.kafka:
        node_env.update(plan.services[node].get("environment") or {})
    for name in sorted(plan.islet):
        env = plan.services[name].get("environment") or {}
        user = env.get("ISLET_KAFKA_SASL_USERNAME")
        if not user:
            continue
        expected = node_env.get("KAFKA_PASSWORD_" + user.upper().replace("-", "_"))
        if expected is None:
            raise Failure(f"{name} authenticates to Kafka as {user}, a user the kafka service does not create")
        if str(env.get("ISLET_KAFKA_SASL_PASSWORD")) != str(expected):
            raise Failure(f"{name}'s ISLET_KAFKA_SASL_PASSWORD is not the password the kafka service creates {user} with")
        say(f"ok       {name} authenticates as Kafka user {user} with that user's password")


class Processes:
    def __init__(self, run_dir):
        self.run_dir = run_dir
        self.running = {}

    def start(self, name, command, env):
        with open(os.path.join(self.run_dir, f"{name}.log"), "wb") as log:
            process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.run_dir)
        self.running[name] = process
        return process

    def log_tail(self, name, lines=15):
        with open(os.path.join(self.run_dir, f"{name}.log"), errors="replace") as f:
            return f.read().splitlines()[-lines:]

    def wait_ready(self, name, url, seconds=READY_SECONDS):
        process = self.running[name]
        deadline = time.monotonic() + seconds
        last = "no answer"
        while time.monotonic() < deadline:
            status = process.poll()
            if status is not None:
                raise Failure(f"{name} exited with status {status} before it was ready; its last words:\n      "
                              + "\n      ".join(self.log_tail(name)))
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except urllib.error.HTTPError as error:
                last = f"{error.code} {error.read()[:300].decode(errors='replace')}"
            except OSError as error:
                last = str(error)
            time.sleep(0.2)
        raise Failure(f"{name} was not ready after {seconds} s ({url}: {last}); its log ends:\n      "
                      + "\n      ".join(self.log_tail(name)))

    def stop(self):
        """SIGTERM, as `docker compose stop` sends; the status of each."""
        statuses = {}
        for name, process in reversed(list(self.running.items())):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for name, process in self.running.items():
            try:
                statuses[name] = process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                statuses[name] = "killed after 20 s"
        self.running = {}
        return statuses


def keys_of(env, variable):
    return [part for part in (env.get(variable) or "").split(",") if part]


def play(plan, processes, bin_dir):
    """islet-demo play against the services, with the keys the file gives them."""
    for service, port in [("token-registry", 8081), ("content-service", 8083), ("analytics-ingest", 8084), ("apns-simulator", 8090)]:
        if (service, port) not in plan.ports:
            raise Failure(f"the demo needs {service} on port {port}, which the file does not give it")
    registry = plan.services["token-registry"]["environment"]
    content = plan.services["content-service"]["environment"]
    url = lambda service, port: f"http://127.0.0.1:{plan.ports[(service, port)]}"
    jwt_key = keys_of(registry, "ISLET_AUTH_HS256_KEYS")[0]
    ticket_key = keys_of(registry, "ISLET_TICKET_HS256_KEYS")[0]
    backend = [entry for entry in keys_of(content, "ISLET_GRPC_KEYS") if entry.rsplit(":", 1)[-1] in ("write", "read+write")]
    backend_key = backend[-1].split("=", 1)[1].rsplit(":", 1)[0]
    images = [name for name in plan.islet if product(plan.services[name]) == "islet-demo"]
    command = [
        os.path.join(os.path.abspath(bin_dir), "islet-demo"), "play", "--bootstrap", plan.bootstrap,
        "--registry", url("token-registry", 8081), "--content", url("content-service", 8083),
        "--ingest", url("analytics-ingest", 8084), "--simulator", url("apns-simulator", 8090),
        "--jwt-key", jwt_key, "--ticket-key", ticket_key, "--backend-key", backend_key,
    ]
    if images:
        command += ["--images", url(images[0], 8099)]
    say("$ islet-demo play (the demo's scenarios, with the file's keys)")
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=300, cwd=processes.run_dir)
    except subprocess.TimeoutExpired:
        raise Failure("the demo's scenarios did not finish within 300 s against the services as compose configures them")
    with open(os.path.join(processes.run_dir, "play.log"), "w") as f:
        f.write(result.stdout + result.stderr)
    if result.returncode != 0:
        raise Failure("the demo's scenarios failed against the services as compose configures them:\n      "
                      + "\n      ".join((result.stdout + result.stderr).splitlines()[-20:]))
    photos = result.stdout.count("photo inline")
    say(f"ok       the food order, the ride and the match played through ({photos} photos inline as thumbnails)")
    if images and photos == 0:
        raise Failure("no photo reached a phone as a thumbnail: is example-images among ISLET_THUMBNAIL_HOSTS?")


def run(config_path, bin_dir, bootstrap, run_dir, with_play):
    with open(config_path) as f:
        config = yaml.safe_load(f)
    with open(os.path.join(REPO, "Dockerfile")) as f:
        dockerfile = f.read()
    for line in DOCKERFILE_PROOF:
        if line not in dockerfile:
            raise Failure(f"the Dockerfile no longer has `{line}`: IMAGE_PATHS in {os.path.basename(__file__)} must follow it")
    plan = Plan(config, bin_dir, bootstrap, run_dir)
    check_kafka_users(plan)
    plan.check_listen_addresses()
    processes = Processes(run_dir)
    try:
        for name in start_order(plan.islet, plan.services):
            env, changes = plan.environment(name)
            command = plan.command(name)
            say(f"-- {name}: {' '.join([product(plan.services[name])] + command[1:])}")
            for change in changes:
                say(f"   {change}")
            processes.start(name, command, env)
            processes.wait_ready(name, plan.health_url(name))
            say(f"ok       {name} ready ({plan.health_url(name)})")
        if with_play:
            play(plan, processes, bin_dir)
    finally:
        statuses = processes.stop()
    failed = {name: status for name, status in statuses.items() if status != 0}
    if failed:
        raise Failure(f"not stopped cleanly by SIGTERM: {failed} (logs in {run_dir})")
    say(f"ok       every service stopped on SIGTERM with status 0")


def refused_logins(config_path, bin_dir, bootstrap, run_dir):
    """Each service that logs in to Kafka, with compose's SASL settings unchanged, against a broker
    that requires authentication and knows no user (tansu --authentication: it refuses every SCRAM
    login): the login is attempted with the file's mechanism and refused, and /health/ready says so."""
    with open(config_path) as f:
        config = yaml.safe_load(f)
    plan = Plan(config, bin_dir, bootstrap, run_dir)
    processes = Processes(run_dir)
    expected = "Kafka refused this client's login"
    try:
        names = []
        for name in start_order(plan.islet, plan.services):
            env, _ = plan.environment(name)
            given = plan.services[name].get("environment") or {}
            for key, value in given.items():
                if KAFKA_SECURITY.match(key):
                    env[key] = str(value)
            processes.start(name, plan.command(name), env)
            if given.get("ISLET_KAFKA_SASL_USERNAME"):
                names.append(name)
            else:
                # Not a Kafka client (the simulator, the example images): what the others need.
                processes.wait_ready(name, plan.health_url(name))
        for name in names:
            url = plan.health_url(name)
            deadline = time.monotonic() + 60
            answer = ""
            while time.monotonic() < deadline:
                if processes.running[name].poll() is not None:
                    raise Failure(f"{name} exited when its login was refused:\n      " + "\n      ".join(processes.log_tail(name)))
                try:
                    with urllib.request.urlopen(url, timeout=2) as response:
                        answer = f"{response.status} {response.read()[:400].decode(errors='replace')}"
                except urllib.error.HTTPError as error:
                    answer = f"{error.code} {error.read()[:2000].decode(errors='replace')}"
                except OSError as error:
                    answer = str(error)
                if answer.startswith("503") and expected in answer and "SCRAM" in answer:
                    break
                time.sleep(0.3)
            else:
                raise Failure(f"{name}'s /health/ready never said its SCRAM login was refused (last: {answer[:400]})")
            reason = re.search(r'"(Kafka refused[^"]*)"', answer)
            say(f"ok       {name}: 503, {reason.group(1)[:150] if reason else expected}…")
    finally:
        processes.stop()


def self_test(config_path, bin_dir, bootstrap, run_dir):
    """The check itself fails, with the service's own words, on a file compose would run wrongly:
    the normalized file with one thing broken at a time, through the same start-up as the check."""
    with open(config_path) as f:
        base = yaml.safe_load(f)

    def without_link_keys(config):
        del config["services"]["content-service"]["environment"]["ISLET_LINK_KEYS"]

    def missing_secret(config):
        config["secrets"]["apns_auth_key"]["file"] = os.path.join(run_dir, "no-such-AuthKey.p8")

    def registry_on_loopback(config):
        config["services"]["token-registry"]["environment"]["ISLET_GRPC_HOST"] = "127.0.0.1"

    cases = [
        ("content-service without ISLET_LINK_KEYS", without_link_keys, ["content-service exited", "ISLET_LINK_KEYS"]),
        ("the APNs key's secret file missing", missing_secret, ["exited", "no-such-AuthKey.p8"]),
        ("token-registry's gRPC API on its container's loopback", registry_on_loopback, ["token-registry listens on 127.0.0.1:9081"]),
    ]
    for number, (title, breaking, expected) in enumerate(cases, start=1):
        config = copy.deepcopy(base)
        breaking(config)
        broken = os.path.join(run_dir, f"broken-{number}.yml")
        with open(broken, "w") as f:
            yaml.safe_dump(config, f)
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                run(broken, bin_dir, bootstrap, os.path.join(run_dir, f"broken-{number}"), False)
        except Failure as failure:
            text = str(failure)
            if not all(fragment in text for fragment in expected):
                raise Failure(f"self-test: {title}: the check failed, but not naming {expected}: {text[:400]}")
            words = [line.strip() for line in text.splitlines() if expected[-1] in line]
            say(f"ok       refused: {title}: {(words[-1] if words else text)[-170:]}")
            continue
        raise Failure(f"self-test: {title}: the check passed")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("config", nargs="?")
    parser.add_argument("--bin", required=True)
    parser.add_argument("--bootstrap")
    parser.add_argument("--run-dir", required=True)
    parser.add_argument("--play", action="store_true")
    parser.add_argument("--self-test", action="store_true")
    parser.add_argument("--refused-logins", action="store_true",
                        help="start the services with their SASL settings against --bootstrap, a broker that refuses every login")
    args = parser.parse_args()
    os.makedirs(args.run_dir, exist_ok=True)
    # Stopped from outside (CI's timeout, Ctrl-C): the services it started are stopped too.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        if args.self_test:
            self_test(args.config, args.bin, args.bootstrap, args.run_dir)
        elif args.refused_logins:
            refused_logins(args.config, args.bin, args.bootstrap, args.run_dir)
        else:
            run(args.config, args.bin, args.bootstrap, args.run_dir, args.play)
    except Failure as failure:
        print(f"  FAIL     {failure}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
