# shellcheck shell=bash
# Helpers shared by the scripts in scripts/. Sourced, never run:
#
#   repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
#   . "$repo/scripts/lib.sh"
#
# Only functions: sourcing it sets no variable, shell option or trap of the caller.

# A free TCP port on 127.0.0.1: the kernel's choice, free when printed (not reserved).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }

# Fails (exit status 2, a line per port on stderr) unless no process listens on any of the TCP
# PORTs, on any address (IPv4 or IPv6, loopback or not): a service started on a taken port either
# cannot listen or shares "localhost" with the other process, whose answers then look like ours.
require_free_ports() {  # port…
  local port holders taken=0
  for port in "$@"; do
    if command -v ss >/dev/null 2>&1; then
      [ -n "$(ss -Hltn "sport = :$port" 2>/dev/null)" ] || continue
      holders=$(ss -Hltnp "sport = :$port" 2>/dev/null | grep -oE 'users:\(\("[^"]+",pid=[0-9]+' \
        | sed -E 's/users:\(\("([^"]+)",pid=([0-9]+)/\1 (pid \2)/' | sort -u | paste -sd, - || true)
    else
      # Without iproute2: a listener anywhere on the port makes binding the wildcard address fail.
      python3 - "$port" <<'PY' && continue
import socket, sys
port = int(sys.argv[1])
for family, address in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET6, "::")):
    s = socket.socket(family, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if family == socket.AF_INET6:
        s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    try:
        s.bind((address, port))
    except OSError:
        sys.exit(1)
    finally:
        s.close()
PY
      holders=""
    fi
    echo "port $port is taken by ${holders:-another process (ss -ltnp as root names it)}: stop it first" >&2
    taken=1
  done
  [ "$taken" = 0 ] || return 2
}

# Waits until URL answers with a 2xx, trying every 0.1 s, at most TRIES times (default 600: 60 s);
# fails with "no answer from URL" on stderr.
wait_http() {  # URL [tries]
  for _ in $(seq 1 "${2:-600}"); do curl -sf "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "no answer from $1" >&2; return 1
}

# Stops each process (SIGTERM) and waits for it; one already gone is no error.
stop_pids() {  # pid…
  local pid
  for pid in "$@"; do kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
}

# 32 random bytes as hex: a key for the services' HMAC settings.
new_secret() { python3 -c 'import secrets; print(secrets.token_hex(32))'; }

# Runs a command as root: directly when root, else through sudo.
as_root() { if [ "$(id -u)" -eq 0 ]; then "$@"; else sudo "$@"; fi; }

# Builds each product in release mode, showing only the compiler's error lines (on stderr). A failed
# build fails the caller under `set -eo pipefail`.
build_release() {  # product…
  local product
  for product in "$@"; do swift build -c release --product "$product" | { grep -E "error:" >&2 || true; }; done
}

# The benchmark executables (islet-kafka-bench, islet-dispatch-bench, islet-content-bench,
# islet-stack-bench, islet-http-load) are a package of their own, Benchmarks/ (its Package.swift).
# build_benchmarks builds each in release mode as build_release does the product's; benchmarks_bin
# prints the folder they are built into. Both take the package's path from this file's, so they
# work from any directory.
build_benchmarks() {  # product…
  local product
  for product in "$@"; do
    swift build -c release --package-path "$(dirname "${BASH_SOURCE[0]}")/../Benchmarks" --product "$product" \
      | { grep -E "error:" >&2 || true; }
  done
}
benchmarks_bin() { swift build -c release --package-path "$(dirname "${BASH_SOURCE[0]}")/../Benchmarks" --show-bin-path; }

# Runs a command (its output passes through) and writes the CPU seconds (user + system) it and its
# children used to FILE; returns its exit status.
cpu_of() {  # file command…
  python3 -c 'import resource, subprocess, sys
r = subprocess.run(sys.argv[2:])
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{u.ru_utime + u.ru_stime:.4f}\n")
sys.exit(r.returncode)' "$@"
}

# CPU seconds (user + system) a running process has used so far.
cpu_seconds() {
  python3 -c 'import os,sys; f=open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")",1)[1].split(); print((int(f[11])+int(f[12]))/os.sysconf("SC_CLK_TCK"))' "$1" 2>/dev/null || echo 0
}
# CPU seconds a running process has used since it had used START (a `cpu_seconds` reading).
cpu_since() {  # PID START
  python3 -c "print($(cpu_seconds "$1") - $2)"
}
