#!/usr/bin/env python3
"""Holds every curl and grpcurl example of README.md and docs/*.md to the code (run by scripts/test.sh
after scripts/test_check_doc_examples.py; no Docker, no network, no build).

  check_doc_examples.py [--routes] [FILE.md …]

An example is a `curl` or `grpcurl` command in a fenced code block (a command continued with `\\` is
one), or an inline code span that starts with one. What the code says is read from the Swift sources,
the .proto files and docker-compose.yml, never written down here:

  listeners  each service's ports: its executable's `defaultHTTPPort` (Services/*Executable/main.swift,
             the product name from Package.swift), the operator port (`ISLET_OPERATOR_PORT`, the HTTP
             port + 100 by default, Shared/IsletRuntime/ServiceSettings.swift) when it serves one, its
             `ISLET_GRPC_PORT` default when it serves gRPC, the simulator's admin port; then the
             compose file's ISLET_*_PORT values and its published host ports;
  routes     what each listener's Hummingbird router answers: `makeRouter` (/health, /health/ready,
             /health/live, /metrics) or `makeAppRouter` (the /health routes only), plus the routes the
             service adds (`router.get("…")`, `api.put("…")` on `router.group("v1")`, `RouterPath(…)`);
  handling   what a route's handler (and the functions it calls, three calls deep) reads: the
             `Authorization` header (a JWT when its check says so, else a backend key; the scheme from
             the `bearer` it compares), a JSON body whose Content-Type must be application/json, and
             the struct it decodes the body as;
  gRPC       the services and methods of the .proto files, the methods each server's
             BackendAuthInterceptor opens (and with which metadata entry and scheme), plaintext, no
             reflection.

The rules, each held by scripts/test_check_doc_examples.py to an example that breaks it:

  curl     1. the port is a known HTTP listener (an unknown port or an outside URL is `skipped`, with
              the reason); a gRPC port is refused;
           2. the method (-X/--request; -I: HEAD; -G: GET; with -d/--data*/--json: POST; else GET)
              and the path (query string dropped) are a route of that listener; `$VAR`, `{x}`, `<x>`
              and `…` in a segment stand for a `:parameter`;
           3. a route that checks a credential gets it: the header, the scheme, and not a backend
              key (`$…KEY`) where a JWT is checked or a JWT where a key is; a route that checks none
              gets none (sending one tells the reader it is needed);
           4. a route that reads a JSON body gets one, with `Content-Type: application/json` (curl's
              -d alone sends a form: 415);
           5. an inline body that looks like JSON, or goes to a JSON route, is JSON once shell
              variables are replaced by placeholder strings; its top-level fields are stored
              properties of the struct the handler decodes (when its Decodable is synthesized: an
              unknown key is silently ignored), and for a route of docs/openapi.yaml (on the port of
              its `servers` URL) properties of the request schema, with every required one.
  grpcurl  1. the address is a known gRPC listener (else `skipped`, or refused if it is an HTTP one);
           2. the method exists in the .proto files, is of the service that port serves, and is one
              its BackendAuthInterceptor opens (any other is refused to every backend);
           3. -plaintext when the server is plaintext; -proto (found under an -import-path and
              defining the service) or -protoset when the server has no reflection;
           4. the interceptor's metadata entry (`-H 'authorization: Bearer …'`) with its scheme;
           5. -d is JSON (as above) whose field names, nested messages too, are fields of the
              request message (proto name or lowerCamel JSON name).

docs/openapi.yaml's paths against the routes are checked by Tests/ContentServiceTests
(OpenAPIDocumentTests), not here.

An example meant to show a refusal is marked with `<!-- example: refused -->` on the line before its
code fence: it must then break at least one rule. `--routes` prints what was read from the code.
Exit status: 0 when every example passes or is skipped, 1 otherwise.
"""
import glob
import json
import os
import re
import sys
from dataclasses import dataclass, field

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))

try:
    import yaml
except ImportError:  # scripts/check-compose.sh installs PyYAML there
    sys.path.insert(0, os.path.join(os.environ.get("ISLET_TOOLS", os.path.join(REPO, ".tools")), "compose-check"))
    import yaml

DOC_GLOBS = ["README.md", "docs/*.md"]
REFUSED_MARK = re.compile(r"<!--\s*example:\s*refused\s*-->")
HTTP_METHODS = ("get", "put", "post", "delete", "patch", "head")
# Where request body types are declared besides the service's own folder.
MODEL_DIRECTORIES = [os.path.join(REPO, "Shared", "IsletMessages")]


# ---------------------------------------------------------------------------------------------------
# Swift sources: comments blanked, strings skipped, bodies matched.

def _skip_string(text, i):
    """The index after the Swift string literal starting at text[i] (`"`, `\"\"\"` or `#"`)."""
    hashes = 0
    while text[i] == "#":
        hashes += 1
        i += 1
    triple = text.startswith('"""', i)
    i += 3 if triple else 1
    close = ('"""' if triple else '"') + "#" * hashes
    escape = "\\" + "#" * hashes
    while i < len(text):
        if text.startswith(escape, i):
            j = i + len(escape)
            if j < len(text) and text[j] == "(":
                i = _matching(text, j) + 1
            else:
                i = j + 1
            continue
        if text.startswith(close, i):
            return i + len(close)
        if not triple and text[i] == "\n":
            return i
        i += 1
    return i


def _matching(text, i):
    """The index of the bracket closing the one at text[i], skipping strings."""
    pairs = {"(": ")", "{": "}", "[": "]"}
    stack = [pairs[text[i]]]
    i += 1
    while i < len(text) and stack:
        c = text[i]
        if c == '"' or (c == "#" and text.startswith('#"', i)):
            i = _skip_string(text, i)
            continue
        if c in pairs:
            stack.append(pairs[c])
        elif stack and c == stack[-1]:
            stack.pop()
            if not stack:
                return i
        i += 1
    return len(text) - 1


def code_view(text):
    """`text` with its comments blanked (same length, same lines): doc comments name routes too."""
    out = list(text)
    i = 0
    while i < len(text):
        if text.startswith("//", i):
            end = text.find("\n", i)
            end = len(text) if end < 0 else end
            out[i:end] = " " * (end - i)
            i = end
        elif text.startswith("/*", i):
            end = text.find("*/", i)
            end = len(text) if end < 0 else end + 2
            out[i:end] = [c if c == "\n" else " " for c in text[i:end]]
            i = end
        elif text[i] == '"' or text.startswith('#"', i):
            i = _skip_string(text, i)
        else:
            i += 1
    return "".join(out)


FUNC = re.compile(r"\b(?:func\s+(\w+)|(init))\s*[?!]?\s*(?:<[^>{]*>)?\s*\(")
TYPE = re.compile(r"\b(?:struct|enum|class|actor|extension)\s+(\w+)[^{;]*\{")


def functions(code):
    """(name, enclosing type, body) of every function and initializer of a code view."""
    types = []
    for match in TYPE.finditer(code):
        types.append((match.end() - 1, _matching(code, match.end() - 1), match.group(1)))
    found = []
    for match in FUNC.finditer(code):
        close = _matching(code, match.end() - 1)
        brace = code.find("{", close)
        if brace < 0:
            continue
        enclosing = [t for t in types if t[0] < match.start() < t[1]]
        owner = min(enclosing, key=lambda t: t[1] - t[0])[2] if enclosing else None
        found.append((match.group(1) or match.group(2), owner, code[brace:_matching(code, brace) + 1]))
    return found


def read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def swift_code(directory):
    """{path: code view} of the hand-written Swift files of a directory and its subfolders (a
    target's parts; generated *.pb/*.grpc left out)."""
    files = {}
    for path in sorted(glob.glob(os.path.join(directory, "**", "*.swift"), recursive=True)):
        if path.endswith((".pb.swift", ".grpc.swift")):
            continue
        files[path] = code_view(read(path))
    return files


# ---------------------------------------------------------------------------------------------------
# The model: listeners, routes, what each handler reads, gRPC services.

@dataclass
class Route:
    method: str  # GET, PUT, …
    path: str  # /v1/activities/:activityId
    credential: str = None  # None, "JWT" or "backend key"
    header: str = None  # "Authorization"
    scheme: str = None  # "Bearer"
    json_body: bool = False  # reads a JSON body and insists on Content-Type: application/json
    source: str = ""
    body_type: str = None  # the Decodable struct its body is read as
    body_fields: set = None  # its keys, when the struct's Decodable is synthesized

    @property
    def segments(self):
        return [s for s in self.path.split("/") if s]


@dataclass
class GRPCServer:
    services: set  # full proto service names served (islet.tokens.v1.TokenRegistry)
    open_methods: dict  # "islet.tokens.v1.TokenRegistry/LookupActivity" → "read"
    metadata: str  # "authorization"
    scheme: str  # "Bearer"
    plaintext: bool
    reflection: bool


@dataclass
class Listener:
    service: str
    kind: str  # app, operator, grpc, admin
    routes: list = field(default_factory=list)
    grpc: GRPCServer = None

    KINDS = {"app": "HTTP", "operator": "operator", "grpc": "gRPC", "admin": "admin", "simulated": "simulated APNs"}

    @property
    def name(self):
        return f"{self.service} {self.KINDS.get(self.kind, self.kind)}"


@dataclass
class ProtoMessage:
    name: str
    fields: dict  # proto name → (type, json name)


@dataclass
class Model:
    listeners: dict  # port → Listener
    protos: dict  # proto file basename → {"path", "package", "services": {full name: {method: request type}}}
    messages: dict  # full message name → ProtoMessage
    openapi: dict  # (port, METHOD, /path/:param) → request schema (resolved), or {}
    notes: list = field(default_factory=list)


def config_int(code, key):
    """The default of `config.int("key", default: N` in a code view, or None."""
    match = re.search(r'config\.int\(\s*"' + re.escape(key) + r'"\s*,\s*default:\s*([0-9_]+)', code)
    return int(match.group(1).replace("_", "")) if match else None


def variable_name(key):
    """`islet.http.port` → `ISLET_HTTP_PORT` (IsletConfig.variableName)."""
    return key.replace(".", "_").replace("-", "_").upper()


class Sources:
    """Function bodies by name over a set of directories, for following a handler's calls."""

    def __init__(self, directories):
        self.directories = list(directories)
        self.bodies = {}
        for directory in directories:
            for code in swift_code(directory).values():
                for name, owner, body in functions(code):
                    self.bodies.setdefault(name, []).append((owner, body))

    KEYWORDS = {"if", "guard", "switch", "for", "while", "return", "try", "await", "catch", "init", "json"}
    # `Type.name(` and `Type().name(` are Type's; `value.name(` and `name(` whichever has that name.
    CALL = re.compile(r"(?:\b(\w+)(\(\))?\.)?\b([a-z]\w*)\s*\(")

    def reach(self, text, depth=3):
        """`text` and the bodies of the functions it calls, `depth` calls deep."""
        seen, frontier, parts = set(), [text], [text]
        for _ in range(depth):
            following = []
            for part in frontier:
                for receiver, _, name in self.CALL.findall(part):
                    if name in self.KEYWORDS or name not in self.bodies:
                        continue
                    typed = receiver[:1].isupper() and receiver != "Self"
                    for owner, body in self.bodies[name]:
                        if typed and owner != receiver:
                            continue
                        if (owner, name) not in seen:
                            seen.add((owner, name))
                            following.append(body)
            parts.extend(following)
            frontier = following
        return "\n".join(parts)


def decoded_fields(type_name, directories):
    """The JSON keys a synthesized `Decodable` struct reads (its stored properties), or None when
    the struct decodes itself (CodingKeys, init(from:)) or is not found."""
    for directory in directories:
        for code in swift_code(directory).values():
            declaration = re.search(r"\bstruct\s+" + re.escape(type_name) + r"\b[^{]*\{", code)
            if not declaration:
                continue
            body = code[declaration.end():_matching(code, declaration.end() - 1)]
            if re.search(r"\bCodingKeys\b|\binit\s*\(\s*from\s+decoder", body):
                return None
            top, i = "", 0
            while i < len(body):  # the struct's own level: nested bodies left out
                if body[i] == "{":
                    i = _matching(body, i) + 1
                    top += "{}"
                    continue
                top += body[i]
                i += 1
            return {name for name in re.findall(r"^\s*(?:(?:public|package|internal)\s+)?(?:var|let)\s+(\w+)\s*:[^\n{]*$", top, re.M)}
    return None


def handling(text, sources):
    """What a handler reads: (credential, header, scheme, json_body, decoded type)."""
    reached = sources.reach(text)
    # The body's type: decoded by the handler, or two calls deep.
    decoded = re.search(r"\.decode\w*\(\s*([A-Z]\w*)\.self", sources.reach(text, depth=2))
    credential = header = scheme = None
    if re.search(r"headers\[(?:values:\s*)?\.authorization\]", reached):
        header = "Authorization"
        credential = "JWT" if "JWT" in reached else "backend key"
        bearer = re.search(r'(?:==\s*|hasPrefix\(\s*)"(bearer)\b', reached, re.IGNORECASE)
        scheme = bearer.group(1).capitalize() if bearer else None
    json_body = 'hasPrefix("application/json")' in reached
    return credential, header, scheme, json_body, decoded.group(1) if decoded else None


ROUTE_CALL = re.compile(r'\b(\w+)\.(' + "|".join(HTTP_METHODS) + r')\(\s*(?:"([^"]*)"|RouterPath\(([^)]*)\))')


def join_path(*parts):
    segments = [s for part in parts for s in part.split("/") if s]
    return "/" + "/".join(segments)


def routes_in(body, router_names, sources, source):
    """The routes a function body registers on `router_names` (its groups found in it too)."""
    strings = dict(re.findall(r'let\s+(\w+)\s*=\s*"([^"]*)"', body))
    prefixes = {name: "" for name in router_names}
    for name, parent, prefix in re.findall(r'let\s+(\w+)\s*=\s*(\w+)\.group\(\s*"([^"]*)"\s*\)', body):
        if parent in prefixes:
            prefixes[name] = join_path(prefixes[parent], prefix)
    calls = [m for m in ROUTE_CALL.finditer(body) if m.group(1) in prefixes]
    routes = []
    for index, match in enumerate(calls):
        receiver, method, literal, expression = match.groups()
        if literal is None:
            literal = ""
            for term in expression.split("+"):
                term = term.strip()
                literal += term.strip('"') if term.startswith('"') else strings.get(term, "{?}")
        # The call with its trailing closure, if any: `api.put("…") { request, context in … }`.
        end = _matching(body, body.index("(", match.end(2))) + 1
        trailing = re.match(r"\s*\{", body[end:])
        if trailing:
            end = _matching(body, end + trailing.end() - 1) + 1
        credential, header, scheme, json_body, decoded = handling(body[match.start():end], sources)
        fields = decoded_fields(decoded, sources.directories + MODEL_DIRECTORIES) if decoded else None
        routes.append(Route(method.upper(), join_path(prefixes[receiver], literal), credential, header, scheme, json_body, source, decoded, fields))
    return routes


def add_routes_of(type_name, library, sources):
    """The routes `TypeName(…).addRoutes(to:)` registers (its `addRoutes` body)."""
    for path, code in swift_code(library).items():
        declaration = re.search(r"\b(?:struct|enum|class|actor)\s+" + re.escape(type_name) + r"\b", code)
        if not declaration:
            continue
        for name, _, body in functions(code[declaration.start():]):
            if name == "addRoutes":
                parameter = re.search(r"addRoutes\s*(?:<[^>]*>)?\s*\(\s*to\s+(\w+)\s*:", code[declaration.start():])
                return routes_in(body, {parameter.group(1) if parameter else "router"}, sources, os.path.relpath(path, REPO))
    raise SystemExit(f"check_doc_examples: no addRoutes of {type_name} in {os.path.relpath(library, REPO)}")


def operations_routes(sources):
    """The routes `makeRouter` and `makeAppRouter` start with (Shared/IsletRuntime)."""
    runtime = os.path.join(REPO, "Shared", "IsletRuntime")
    operations = code_view(read(os.path.join(runtime, "OperationsRoutes.swift")))
    bodies = {name: body for name, _, body in functions(operations)}
    source = "Shared/IsletRuntime/OperationsRoutes.swift"

    def of(function):
        routes = routes_in(bodies[function], {"router"}, sources, source)
        for called in re.findall(r"\b(add\w*)\(", bodies[function]):
            if called != function and called in bodies:
                routes += of(called)
        return routes

    service_runtime = {name: body for name, _, body in functions(code_view(read(os.path.join(runtime, "ServiceRuntime.swift"))))}
    made = {}
    for maker in ("makeRouter", "makeAppRouter"):
        called = re.search(r"OperationsRoutes\.(\w+)\(", service_runtime[maker]).group(1)
        made[maker] = of(called)
    return made


def operator_offset():
    settings = code_view(read(os.path.join(REPO, "Shared", "IsletRuntime", "ServiceSettings.swift")))
    return int(re.search(r'"islet\.operator\.port".*?httpPort\s*\+\s*([0-9_]+)', settings, re.S).group(1).replace("_", ""))


def executables():
    """{target: product} of Package.swift's executables."""
    package = read(os.path.join(REPO, "Package.swift"))
    return {target: name for name, target in re.findall(r'\.executable\(\s*name:\s*"([^"]+)",\s*targets:\s*\["([^"]+)"\]', package)}


def swift_service_name(package, service):
    """`islet.tokens.v1` + `TokenRegistry` → `Islet_Tokens_V1_TokenRegistry` (swift-protobuf's naming)."""
    def upper(part):
        return "".join(piece[:1].upper() + piece[1:] for piece in part.split("_"))
    return "_".join(upper(p) for p in package.split(".")) + "_" + service


def read_protos():
    protos, messages = {}, {}
    for path in sorted(glob.glob(os.path.join(REPO, "**", "*.proto"), recursive=True)):
        relative = os.path.relpath(path, REPO)
        if relative.startswith((".build", ".tools", ".islet-run")):
            continue
        text = re.sub(r"//[^\n]*", "", read(path))
        package = re.search(r"\bpackage\s+([\w.]+)\s*;", text).group(1)
        services = {}
        for service, body in re.findall(r"\bservice\s+(\w+)\s*\{(.*?)\n\}", text, re.S):
            services[f"{package}.{service}"] = {
                method: request for method, request in re.findall(r"\brpc\s+(\w+)\s*\(\s*(?:stream\s+)?([\w.]+)\s*\)", body)}
        for name, body in re.findall(r"\bmessage\s+(\w+)\s*\{(.*?)\n\}", text, re.S):
            fields = {}
            for _, kind, proto_name, options in re.findall(
                    r"(?:(repeated|optional)\s+)?([\w.<>, ]+?)\s+(\w+)\s*=\s*\d+\s*(\[[^\]]*\])?\s*;", body):
                json_name = re.search(r'json_name\s*=\s*"([^"]+)"', options or "")
                camel = re.sub(r"_([a-z0-9])", lambda m: m.group(1).upper(), proto_name)
                kind = kind.strip()
                if "." not in kind and kind[:1].isupper():
                    kind = f"{package}.{kind}"
                fields[proto_name] = (kind, json_name.group(1) if json_name else camel)
            messages[f"{package}.{name}"] = ProtoMessage(f"{package}.{name}", fields)
        for service in services.values():
            for method, request in service.items():
                service[method] = request if "." in request else f"{package}.{request}"
        protos[os.path.basename(path)] = {"path": relative, "package": package, "services": services}
    return protos, messages


def grpc_server(library_code, protos):
    """What the GRPCServerService a service builds serves (its BackendAuthInterceptor's table)."""
    shared = os.path.join(REPO, "Shared", "IsletProtos")
    keys = "\n".join(swift_code(shared).values())
    table = re.search(r"permissions:\s*BackendAuthInterceptor\.(\w+)", library_code)
    open_methods, served = {}, set()
    swift_names = {swift_service_name(p["package"], full.rsplit(".", 1)[1]): full
                   for p in protos.values() for full in p["services"]}
    if table:
        entries = re.search(r"static\s+let\s+" + table.group(1) + r"\s*:[^=]*=\s*\[(.*?)\n\s*\]", keys, re.S).group(1)
        for swift_name, method, permission in re.findall(r"(\w+)\.Method\.(\w+)\.descriptor\s*:\s*\.(\w+)", entries):
            full = swift_names.get(swift_name, swift_name)
            served.add(full)
            open_methods[f"{full}/{method}"] = permission
    metadata = re.search(r'metadata\[stringValues:\s*"([^"]+)"\]', keys)
    bearer = re.search(r'hasPrefix\(\s*"(\w+) "', keys)
    server = read(os.path.join(shared, "GRPCServerService.swift"))
    return GRPCServer(
        services=served, open_methods=open_methods, metadata=metadata.group(1) if metadata else None,
        scheme=bearer.group(1).capitalize() if bearer else None, plaintext="transportSecurity: .plaintext" in server,
        reflection=bool(re.search(r"Reflection", library_code + server)))


def build_model():
    sources_shared = [os.path.join(REPO, "Shared", "IsletRuntime"), os.path.join(REPO, "Shared", "IsletProtos")]
    protos, messages = read_protos()
    made = operations_routes(Sources(sources_shared))
    offset = operator_offset()
    products = executables()
    listeners = {}  # (service, kind) → (config key, default port, Listener)
    for main in sorted(glob.glob(os.path.join(REPO, "Services", "*Executable", "main.swift"))):
        target = os.path.basename(os.path.dirname(main))
        product = products.get(target)
        library = os.path.join(REPO, "Services", target[: -len("Executable")])
        if product is None or not os.path.isdir(library):
            continue
        sources = Sources([library] + sources_shared)
        main_code = code_view(read(main))
        library_code = "\n".join(swift_code(library).values())
        runtime = re.search(r"ServiceRuntime\.main\(\s*serviceName:\s*\"[^\"]+\",\s*defaultHTTPPort:\s*([0-9_]+)", main_code)
        if runtime:
            http_port = int(runtime.group(1).replace("_", ""))
            # The function that makes the routers and hands them to the listeners (the App's init).
            body = next((body for code in swift_code(library).values() for _, _, body in functions(code)
                         if re.search(r"runtime\.(?:httpServer|operatorServer)\(", body)), "")
            routers = {name: list(made[maker]) for name, maker in re.findall(r"let\s+(\w+)\s*=\s*runtime\.(makeAppRouter|makeRouter)\(", body)}
            for name in routers:
                for type_name, target_router in re.findall(r"\b([A-Z]\w*)\((?:[^()]|\([^()]*\))*\)\s*\.addRoutes\(\s*to:\s*(\w+)", body):
                    if target_router == name:
                        routers[name] += add_routes_of(type_name, library, sources)
                routers[name] += routes_in(body, {name}, sources, os.path.relpath(library, REPO))
            aliases = dict(re.findall(r"(\w+)\s*=\s*(\w+)\.buildResponder\(\)", body))

            def served(argument):
                inline = re.match(r"runtime\.(makeAppRouter|makeRouter)\(", argument)
                if inline:
                    return list(made[inline.group(1)])
                name = re.match(r"(\w+)", argument).group(1)
                return routers.get(aliases.get(name, name), [])

            app = re.search(r"runtime\.httpServer\(\s*router:\s*([^\n]+)", body)
            listeners[(product, "app")] = ("islet.http.port", http_port, Listener(product, "app", served(app.group(1)) if app else []))
            operator = re.search(r"runtime\.operatorServer\(\s*router:\s*([^\n]+)", body)
            if operator:
                listeners[(product, "operator")] = (
                    "islet.operator.port", http_port + offset, Listener(product, "operator", served(operator.group(1))))
            # The gRPC server, made there or in a function of its own.
            grpc_body = body if "GRPCServerService(" in body else next(
                (other for code in swift_code(library).values() for _, _, other in functions(code) if "GRPCServerService(" in other), "")
            if grpc_body:
                listeners[(product, "grpc")] = (
                    "islet.grpc.port", config_int(library_code, "islet.grpc.port"), Listener(product, "grpc", grpc=grpc_server(grpc_body, protos)))
        else:
            # A Hummingbird Application of its own (the APNs simulator's admin API).
            routes = []
            for type_name in re.findall(r"\b([A-Z]\w*)\.addRoutes\(\s*to:", main_code):
                routes += add_routes_of(type_name, library, sources)
            # `Application(router: router, … port: settings.adminPort)`: the admin API; the other
            # `port: settings.…` is the server it simulates (APNs: HTTP/2 over TLS, not an API of Islet).
            for setting in re.findall(r"\bport:\s*settings\.(\w+)", main_code):
                key_default = re.search(r"\b" + setting + r'\s*=\s*try\s+config\.int\(\s*"([^"]+)"\s*,\s*default:\s*([0-9_]+)', library_code)
                if not key_default:
                    continue
                admin = re.search(r"Application\(\s*router:[^\n]*port:\s*settings\." + setting + r"\b", main_code)
                kind = "admin" if admin else "simulated"
                listeners[(product, kind)] = (key_default.group(1), int(key_default.group(2).replace("_", "")),
                                              Listener(product, kind, routes if admin else None))

    ports, notes = {}, []

    def claim(port, listener, why):
        if port in ports and ports[port] is not listener:
            raise SystemExit(f"check_doc_examples: port {port} is both {ports[port].name} and {listener.name} ({why})")
        ports[port] = listener

    for (product, kind), (key, default, listener) in listeners.items():
        if default:
            claim(default, listener, "code defaults")
    compose = yaml.safe_load(read(os.path.join(REPO, "docker-compose.yml")))
    for name, service in (compose.get("services") or {}).items():
        environment = service.get("environment") or {}
        if isinstance(environment, list):
            environment = dict(item.split("=", 1) if "=" in item else (item, "") for item in environment)
        mine = {kind: (key, default, listener) for (product, kind), (key, default, listener) in listeners.items() if product == name}
        container = {}
        for kind, (key, default, listener) in mine.items():
            value = environment.get(variable_name(key))
            port = int(value) if value not in (None, "") and str(value).isdigit() else None
            if kind == "operator" and port is None:
                http = environment.get("ISLET_HTTP_PORT")
                port = int(http) + offset if http not in (None, "") and str(http).isdigit() else default
            container[port or default] = listener
        for entry in service.get("ports") or []:
            if isinstance(entry, dict):
                host, target = entry.get("published"), entry.get("target")
            else:
                match = re.search(r"(?:\$\{\w+:-(\d+)\}|(\d+)):(\d+)(?:/tcp)?$", str(entry))
                if not match:
                    continue
                host, target = match.group(1) or match.group(2), match.group(3)
            if host is None or target is None:
                continue
            listener = container.get(int(target))
            if listener is not None:
                claim(int(host), listener, f"docker-compose.yml's {name}")
            elif mine:
                notes.append(f"docker-compose.yml publishes {name}'s port {target}, which is none of its listeners in the code")
    return Model(ports, protos, messages, read_openapi(), notes)


def read_openapi():
    """{(port, METHOD, path with :params): resolved request schema} of docs/openapi.yaml."""
    path = os.path.join(REPO, "docs", "openapi.yaml")
    if not os.path.exists(path):
        return {}
    document = yaml.safe_load(read(path))

    def deref(node):
        seen = 0
        while isinstance(node, dict) and "$ref" in node and seen < 10:
            target = document
            for part in node["$ref"].lstrip("#/").split("/"):
                target = target[part]
            node, seen = target, seen + 1
        return node

    found = {}
    for server in document.get("servers") or []:
        match = re.search(r":(\d+)(?:/|$)", server.get("url", ""))
        if not match:
            continue
        port = int(match.group(1))
        for route_path, operations in (document.get("paths") or {}).items():
            for method, operation in operations.items():
                if method not in HTTP_METHODS:
                    continue
                content = (deref(operation.get("requestBody") or {}).get("content") or {}).get("application/json") or {}
                schema = deref(content.get("schema"))
                if isinstance(schema, dict):
                    properties = {}
                    required = set(schema.get("required") or [])
                    for part in [schema] + [deref(s) for s in schema.get("allOf") or []]:
                        properties.update(part.get("properties") or {})
                        required |= set(part.get("required") or [])
                    found[(port, method.upper(), re.sub(r"\{(\w+)\}", r":\1", route_path))] = {
                        "properties": set(properties), "required": required}
    return found


# ---------------------------------------------------------------------------------------------------
# Shell: words as the shell would see them, expansions kept as markers.

EXPANSION_OPEN, EXPANSION_CLOSE = "\ue000", "\ue001"
OPERATORS = ("&&", "||", "|", ";", "&")


def _expansion(text, i):
    """(marker, next index) of the expansion `$…` at text[i], or (None, i)."""
    if text.startswith("$(", i):
        depth, j = 0, i + 1
        while j < len(text):
            depth += {"(": 1, ")": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        return EXPANSION_OPEN + text[i:j + 1] + EXPANSION_CLOSE, j + 1
    match = re.match(r"\$(\{[^}]*\}|\w+)", text[i:])
    if match:
        return EXPANSION_OPEN + match.group(0) + EXPANSION_CLOSE, i + match.end()
    return None, i


def shell_words(line):
    """The words and operators of one logical shell line; `# …` comments dropped."""
    words, word, active, i = [], "", False, 0
    while i < len(line):
        c = line[i]
        if c in " \t\n":
            if active:
                words.append(word)
                word, active = "", False
            i += 1
        elif c == "#" and not active:
            break
        elif c == "'":
            end = line.find("'", i + 1)
            end = len(line) if end < 0 else end
            word, active, i = word + line[i + 1:end], True, end + 1
        elif c == '"':
            i += 1
            while i < len(line) and line[i] != '"':
                if line[i] == "\\" and i + 1 < len(line) and line[i + 1] in '"\\$`':
                    word, i = word + line[i + 1], i + 2
                    continue
                marker, after = _expansion(line, i) if line[i] == "$" else (None, i)
                if marker:
                    word, i = word + marker, after
                else:
                    word, i = word + line[i], i + 1
            active, i = True, i + 1
        elif c == "\\" and i + 1 < len(line):
            word, active, i = word + line[i + 1], True, i + 2
        elif c == "$":
            marker, after = _expansion(line, i)
            if marker:
                word, active, i = word + marker, True, after
            else:
                word, active, i = word + c, True, i + 1
        elif any(line.startswith(op, i) for op in OPERATORS) and not (c == "&" and line[i - 1:i] in "<>"):
            if active:
                words.append(word)
                word, active = "", False
            op = next(op for op in OPERATORS if line.startswith(op, i))
            words.append((op,))
            i += len(op)
        else:
            word, active, i = word + c, True, i + 1
    if active:
        words.append(word)
    return words


def commands(line):
    """The commands of a logical line: lists of words, split at operators, `VAR=…` prefixes dropped."""
    found, current = [], []
    for word in shell_words(line) + [("",)]:
        if isinstance(word, tuple):
            while current and re.match(r"^[A-Za-z_]\w*=", current[0]):
                current.pop(0)
            if current:
                found.append(current)
            current = []
        else:
            current.append(word)
    return found


def shown(word):
    """A word as the reader sees it (expansions back to `$X`)."""
    return word.replace(EXPANSION_OPEN, "").replace(EXPANSION_CLOSE, "")


def is_placeholder(segment):
    return bool(EXPANSION_OPEN in segment or re.fullmatch(r"\{[^}]*\}|<[^>]*>|…|\.\.\.", segment) or "$" in segment or "…" in segment)


def json_of(text):
    """The JSON value of a body, shell expansions replaced by placeholder strings; or raises ValueError."""
    out, in_string, i = [], False, 0
    while i < len(text):
        c = text[i]
        if c == EXPANSION_OPEN:
            end = text.find(EXPANSION_CLOSE, i)
            out.append("placeholder" if in_string else '"placeholder"')
            i = end + 1
            continue
        if in_string and c == "\\":
            out.append(text[i:i + 2])
            i += 2
            continue
        if c == '"':
            in_string = not in_string
        out.append(c)
        i += 1
    return json.loads("".join(out))


# ---------------------------------------------------------------------------------------------------
# The examples.

@dataclass
class Example:
    file: str
    line: int
    words: list
    refused: bool = False  # marked `<!-- example: refused -->`
    source: str = ""  # the command as written

    @property
    def text(self):
        return " ".join(self.source.split()) if self.source else " ".join(shown(w) for w in self.words)

    @property
    def tool(self):
        return self.words[0]


def open_quote(line):
    """Whether a shell line ends inside a quoted string (the command goes on on the next line)."""
    quote, i = None, 0
    while i < len(line):
        c = line[i]
        if quote is None and c == "#" and (i == 0 or line[i - 1] in " \t"):
            return False
        if c == "\\" and quote != "'":
            i += 2
            continue
        if quote is None and c in "'\"":
            quote = c
        elif c == quote:
            quote = None
        i += 1
    return quote is not None


def examples_in(text, name):
    """Every curl and grpcurl command of a markdown text."""
    found = []
    lines = text.split("\n")
    fence, marked, logical, start = None, False, "", 0

    def take(line_text, number, refused):
        for command in commands(line_text):
            if command[0] in ("sudo", "time", "exec"):
                command = command[1:]
            if command and command[0] in ("curl", "grpcurl"):
                found.append(Example(name, number, command, refused, line_text))

    for number, line in enumerate(lines, start=1):
        if fence is None:
            opening = re.match(r"^\s*(`{3,}|~{3,})", line)
            if opening:
                fence = opening.group(1)
                previous = next((l for l in reversed(lines[:number - 1]) if l.strip()), "")
                marked = bool(REFUSED_MARK.search(previous)) and lines[number - 2].strip() == previous.strip()
                continue
            for span in re.findall(r"`((?:grpc)?curl\s[^`]+)`", line):
                take(span, number, False)
            continue
        if re.match(r"^\s*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$", line):
            fence = None
            continue
        body = re.sub(r"^\s*\$ ", "", line) if not logical else line
        if not logical:
            start = number
        if body.endswith("\\") and not body.endswith("\\\\"):
            logical += body[:-1] + " "
            continue
        if open_quote(logical + body):  # a quoted argument (a JSON body) goes on
            logical += body + "\n"
            continue
        take(logical + body, start, marked)
        logical = ""
    return found


@dataclass
class Verdict:
    status: str  # ok, FAIL, skipped
    summary: str
    problems: list


CURL_ARGUMENT_OPTIONS = set("HdXoOwuAebcFTKmEr") | {
    "--header", "--data", "--data-raw", "--data-binary", "--data-ascii", "--data-urlencode", "--json", "--request",
    "--output", "--write-out", "--user", "--user-agent", "--referer", "--cookie", "--cookie-jar", "--form", "--max-time",
    "--connect-timeout", "--retry", "--retry-delay", "--cacert", "--cert", "--key", "--resolve", "--url", "--config",
    "--oauth2-bearer", "--upload-file", "--unix-socket", "--range", "--proxy", "--interface", "--capath"}
CURL_SHORT = {"H": "--header", "d": "--data", "X": "--request", "o": "--output", "w": "--write-out", "u": "--user",
              "A": "--user-agent", "e": "--referer", "b": "--cookie", "c": "--cookie-jar", "F": "--form",
              "m": "--max-time", "T": "--upload-file", "K": "--config", "E": "--cert", "r": "--range"}
DATA_OPTIONS = {"--data", "--data-raw", "--data-binary", "--data-ascii", "--data-urlencode", "--json"}


def parse_curl(words):
    """(options as (long name, value) pairs, flags, urls)."""
    options, flags, urls, i = [], set(), [], 1
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            name, _, inline = word.partition("=")
            if name in CURL_ARGUMENT_OPTIONS:
                value = inline if inline else (words[i + 1] if i + 1 < len(words) else "")
                i += 1 if inline else 2
                (urls.append(value) if name == "--url" else options.append((name, value)))
                continue
            flags.add(name)
        elif word.startswith("-") and len(word) > 1:
            j = 1
            while j < len(word):
                letter = word[j]
                if letter in CURL_SHORT:
                    rest = word[j + 1:]
                    if rest:
                        options.append((CURL_SHORT[letter], rest))
                    else:
                        options.append((CURL_SHORT[letter], words[i + 1] if i + 1 < len(words) else ""))
                        i += 1
                    break
                flags.add("-" + letter)
                j += 1
        else:
            urls.append(word)
        i += 1
    return options, flags, urls


def split_url(url):
    """(scheme, host, port, path) of a URL as curl reads it (http by default)."""
    match = re.match(r"^(?:(\w+)://)?(\[[^\]]+\]|[^/:?#]*)(?::(\d+))?([^?#]*)", url)
    scheme = (match.group(1) or "http").lower()
    port = int(match.group(3)) if match.group(3) else {"http": 80, "https": 443}.get(scheme)
    return scheme, match.group(2), port, match.group(4) or "/"


def match_route(routes, method, path):
    """(route, other methods of that path): a literal segment wins over a parameter."""
    segments = [s for s in path.split("/") if s]
    candidates = []
    for route in routes:
        wanted = route.segments
        if len(wanted) != len(segments):
            continue
        score = 0
        for have, want in zip(segments, wanted):
            if want.startswith(":"):
                continue
            if is_placeholder(have) or have != want:
                break
            score += 1
        else:
            candidates.append((score, route))
    exact = [c for c in candidates if c[1].method == method]
    if exact:
        return max(exact, key=lambda c: c[0])[1], []
    return None, sorted({c[1].method for c in candidates})


def check_credential(problems, headers, needed):
    """Rule 3 for one route (or gRPC method): `needed` is (credential, header, scheme) or None."""
    sent = [(name, value) for name, value in headers if name.lower() == "authorization"]
    if needed is None:
        if sent:
            problems.append(f"sends {sent[0][0]}: {shown(sent[0][1])!s}, but the route checks no credential (the reader would think it needs one)")
        return
    credential, header, scheme = needed
    named = [(name, value) for name, value in headers if name.lower() == header.lower()]
    if not named:
        problems.append(f"sends no {header} header: the route needs '{header}: {scheme} <{credential}>'")
        return
    value = named[0][1].strip()
    if len(named) > 1:
        problems.append(f"sends {header} {len(named)} times: the code takes exactly one")
    parts = value.split(None, 1)
    if scheme and (len(parts) < 2 or parts[0].lower() != scheme.lower()):
        problems.append(f"sends '{header}: {shown(value)}': the code wants '{scheme} <{credential}>'")
        return
    token = shown(parts[-1])
    if credential == "JWT" and re.search(r"KEY", token, re.IGNORECASE):
        problems.append(f"sends {token} where the route checks a JWT (a backend key is for the backends' APIs)")
    if credential == "backend key" and re.search(r"JWT", token, re.IGNORECASE):
        problems.append(f"sends {token} where the route checks a backend key, not a JWT")


def curl_verdict(example, model):
    options, flags, urls = parse_curl(example.words)
    if not urls:
        return Verdict("FAIL", "without a URL", ["no URL"])
    if len(urls) > 1:
        return Verdict("skipped", f"with {len(urls)} URLs", ["one URL per example is checked: split it"])
    scheme, host, port, path = split_url(urls[0])
    listener = model.listeners.get(port)
    if listener is None:
        return Verdict("skipped", shown(urls[0]), [f"port {port} ({scheme}://{shown(host)}) is no Islet listener the code or compose declares"])
    if listener.grpc:
        return Verdict("FAIL", shown(urls[0]), [f"port {port} is {listener.name}: use grpcurl"])
    if listener.routes is None:
        return Verdict("skipped", shown(urls[0]), [f"port {port} is {listener.name}, which simulates a server outside Islet"])
    data = [value for name, value in options if name in DATA_OPTIONS]
    explicit = [value for name, value in options if name == "--request"]
    if explicit:
        method = explicit[-1].upper()
    elif "-I" in flags or "--head" in flags:
        method = "HEAD"
    elif data and not ("-G" in flags or "--get" in flags):
        method = "POST"
    else:
        method = "GET"
    summary = f"{method} {shown(path)} on {listener.name} (:{port})"
    problems = []
    route, others = match_route(listener.routes, method, path)
    if route is None:
        if others:
            problems.append(f"{listener.name} has no {method} {shown(path)}, only {', '.join(others)}")
        else:
            known = ", ".join(f"{r.method} {r.path}" for r in listener.routes)
            problems.append(f"{listener.name} has no route {shown(path)} (it has {known})")
        return Verdict("FAIL", summary, problems)
    summary = f"{method} {route.path} on {listener.name} (:{port})"
    headers = []
    for name, value in options:
        if name == "--header" and ":" in value:
            header, _, content = value.partition(":")
            headers.append((header.strip(), content.strip()))
        elif name == "--oauth2-bearer":
            headers.append(("Authorization", f"Bearer {value}"))
        elif name == "--user":
            headers.append(("Authorization", f"Basic {value}"))
    check_credential(problems, headers, (route.credential, route.header, route.scheme) if route.header else None)
    content_types = [value for name, value in headers if name.lower() == "content-type"]
    json_flag = any(name == "--json" for name, _ in options)
    if route.json_body:
        if not data:
            problems.append(f"sends no body: {route.method} {route.path} reads a JSON body")
        elif not json_flag and not any(v.lower().startswith("application/json") for v in content_types):
            problems.append("sends its body without 'Content-Type: application/json' (curl -d sends a form: the route answers 415)")
    for body in data:
        if body.startswith("@"):
            continue
        looks_json = body.lstrip().startswith(("{", "["))
        if not (looks_json or route.json_body or json_flag):
            continue
        try:
            value = json_of(body)
        except ValueError as error:
            problems.append(f"its body is not JSON ({error})")
            continue
        if route.body_fields is not None and isinstance(value, dict):
            unknown = sorted(set(value) - route.body_fields)
            if unknown:
                reads = ", ".join(sorted(route.body_fields))
                problems.append(f"body fields {', '.join(unknown)} are not read by {route.body_type} (it reads {reads}): ignored")
        schema = model.openapi.get((port, route.method, route.path))
        if schema and isinstance(value, dict):
            unknown = sorted(set(value) - schema["properties"])
            missing = sorted(schema["required"] - set(value))
            if unknown:
                problems.append(f"body fields {', '.join(unknown)} are not in docs/openapi.yaml's request schema")
            if missing:
                problems.append(f"body lacks {', '.join(missing)}, required by docs/openapi.yaml's request schema")
    return Verdict("FAIL" if problems else "ok", summary, problems)


GRPCURL_ARGUMENT_OPTIONS = {
    "import-path", "proto", "protoset", "H", "rpc-header", "reflect-header", "d", "max-time", "connect-timeout",
    "format", "cacert", "cert", "key", "authority", "servername", "keepalive-time", "max-msg-sz", "user-agent", "unix"}


def parse_grpcurl(words):
    options, flags, positional, i = [], set(), [], 1
    while i < len(words):
        word = words[i]
        if word.startswith("-") and len(word) > 1:
            name, eq, inline = word.lstrip("-").partition("=")
            if name in GRPCURL_ARGUMENT_OPTIONS:
                value = inline if eq else (words[i + 1] if i + 1 < len(words) else "")
                options.append((name, value))
                i += 1 if eq else 2
                continue
            flags.add(name)
        else:
            positional.append(word)
        i += 1
    return options, flags, positional


def check_fields(problems, value, message_name, model, where=""):
    """Rule 5: every key of a JSON object is a field of the message (nested messages too)."""
    message = model.messages.get(message_name)
    if message is None or not isinstance(value, dict):
        return
    by_name = {}
    for proto_name, (kind, json_name) in message.fields.items():
        by_name[proto_name] = kind
        by_name[json_name] = kind
    for key, item in value.items():
        if key not in by_name:
            problems.append(f"{where}{key} is no field of {message_name} (fields: {', '.join(message.fields)})")
            continue
        kind = by_name[key]
        if kind in model.messages:
            for element in item if isinstance(item, list) else [item]:
                check_fields(problems, element, kind, model, f"{where}{key}.")


def grpcurl_verdict(example, model):
    options, flags, positional = parse_grpcurl(example.words)
    if not positional:
        return Verdict("FAIL", "without an address", ["no address"])
    address = positional[0]
    match = re.match(r"^(?:\[[^\]]+\]|[^:]*):(\d+)$", shown(address))
    if not match:
        return Verdict("skipped", shown(address), ["the address has no port the check could read"])
    port = int(match.group(1))
    listener = model.listeners.get(port)
    if listener is None:
        return Verdict("skipped", shown(address), [f"port {port} is no Islet listener the code or compose declares"])
    if listener.grpc is None and listener.routes is None:
        return Verdict("skipped", shown(address), [f"port {port} is {listener.name}, which simulates a server outside Islet"])
    if listener.grpc is None:
        return Verdict("FAIL", shown(address), [f"port {port} is {listener.name}, an HTTP listener: use curl"])
    server, problems = listener.grpc, []
    symbol = positional[1] if len(positional) > 1 else None
    summary = f"{symbol or ' '.join(positional[1:]) or 'list'} on {listener.name} (:{port})"
    if server.plaintext and "plaintext" not in flags:
        problems.append("no -plaintext: the server serves plaintext HTTP/2 (grpcurl would try TLS)")
    protos_given = [value for name, value in options if name == "proto"]
    if not server.reflection and not protos_given and not any(name == "protoset" for name, _ in options):
        problems.append("no -proto or -protoset: the server has no reflection")
    import_paths = [value for name, value in options if name == "import-path"] or ["."]
    defined = set()
    for proto in protos_given:
        paths = [os.path.normpath(os.path.join(REPO, directory, proto)) for directory in import_paths]
        existing = [p for p in paths if os.path.exists(p)]
        if not existing:
            problems.append(f"-proto {proto} is not under -import-path {', '.join(import_paths)}")
            continue
        entry = model.protos.get(os.path.basename(existing[0]))
        defined |= set(entry["services"]) if entry else set()
    if symbol in (None, "list", "describe"):
        return Verdict("FAIL" if problems else "ok", summary, problems)
    service, _, method = symbol.replace("/", ".").rpartition(".") if "/" not in symbol else symbol.partition("/")
    known = {full: methods for entry in model.protos.values() for full, methods in entry["services"].items()}
    if service not in known:
        problems.append(f"no proto service {service} (the protos define {', '.join(sorted(known))})")
        return Verdict("FAIL", summary, problems)
    if method not in known[service]:
        problems.append(f"{service} has no method {method} (it has {', '.join(known[service])})")
        return Verdict("FAIL", summary, problems)
    full = f"{service}/{method}"
    if service not in server.services:
        problems.append(f"port {port} serves {', '.join(sorted(server.services))}, not {service}")
    elif full not in server.open_methods:
        problems.append(f"{full} is not in the server's BackendAuthInterceptor table: refused to every backend")
    if protos_given and defined and service not in defined:
        problems.append(f"-proto {', '.join(protos_given)} does not define {service}")
    headers = []
    for name, value in options:
        if name in ("H", "rpc-header") and ":" in value:
            header, _, content = value.partition(":")
            headers.append((header.strip(), content.strip()))
    if server.metadata:
        check_credential(problems, headers, ("backend key", server.metadata, server.scheme))
    for name, body in options:
        if name != "d" or body == "@":
            continue
        try:
            value = json_of(body)
        except ValueError as error:
            problems.append(f"-d is not JSON ({error})")
            continue
        check_fields(problems, value, known[service][method], model)
    return Verdict("FAIL" if problems else "ok", summary, problems)


def verdict(example, model):
    found = (curl_verdict if example.tool == "curl" else grpcurl_verdict)(example, model)
    if not example.refused or found.status == "skipped":
        return found
    if found.status == "FAIL":
        return Verdict("ok", f"{found.summary}, refused as marked", found.problems)
    return Verdict("FAIL", found.summary, ["marked <!-- example: refused --> but breaks no rule"])


def check_files(paths, model, out=sys.stdout):
    counts = {"ok": 0, "FAIL": 0, "skipped": 0}
    for path in paths:
        name = os.path.relpath(path, REPO)
        for example in examples_in(read(path), name):
            found = verdict(example, model)
            counts[found.status] += 1
            print(f"  {found.status:<8} {example.file}:{example.line}: {example.tool} {found.summary}", file=out)
            for problem in found.problems:
                print(f"             {'↳ refused: ' if example.refused and found.status == 'ok' else '↳ '}{problem}", file=out)
            if found.status == "FAIL":
                print(f"             {example.text}", file=out)
    return counts


def print_model(model):
    for port in sorted(model.listeners):
        listener = model.listeners[port]
        outside = listener.routes is None and not listener.grpc
        print(f":{port}  {listener.name}" + ("  (not an API of Islet: examples skipped)" if outside else ""))
        for route in listener.routes or []:
            needs = f"{route.header}: {route.scheme} <{route.credential}>" if route.header else "no credential"
            body = ""
            if route.body_type:
                fields = f" {{{', '.join(sorted(route.body_fields))}}}" if route.body_fields is not None else ""
                body = f", body {route.body_type}{fields}"
            print(f"        {route.method:<6} {route.path:<70} {needs}{', JSON body' if route.json_body else ''}{body}")
        if listener.grpc:
            grpc = listener.grpc
            for method, permission in sorted(grpc.open_methods.items()):
                print(f"        {method:<77} {grpc.metadata}: {grpc.scheme} <key> ({permission})")
    for note in model.notes:
        print(f"note: {note}")


def main(arguments):
    model = build_model()
    if "--routes" in arguments:
        print_model(model)
        return 0
    paths = [os.path.abspath(a) for a in arguments] or sorted(
        p for pattern in DOC_GLOBS for p in glob.glob(os.path.join(REPO, pattern)))
    print("doc examples: every curl and grpcurl example of README.md and docs/*.md against the routes, their credentials and the protos")
    for note in model.notes:
        print(f"  note     {note}")
    counts = check_files(paths, model)
    print(f"check-doc-examples: {counts['ok']} ok, {counts['FAIL']} failed, {counts['skipped']} skipped")
    return 1 if counts["FAIL"] else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
