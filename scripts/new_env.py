#!/usr/bin/env python3
"""Writes a compose .env from .env.example with every placeholder secret replaced by a new one
(scripts/new-env.sh; docs/deployment.md, "First start").

  new_env.py [--dev] [--out PATH] [--key PATH] [--force]

Every `CHANGE-ME` becomes its own random secret; a named placeholder (`CHANGE-ME-REGISTRY-KEY`)
becomes one secret wherever it appears, so two variables that must agree do. --dev also turns on
the dev profile's lines of the file (the APNs simulator, the example images) and, when --key names
a file that does not exist, writes a new P-256 signing key there for the simulator to verify
(a real deployment uses the .p8 key from Apple's developer account instead).
"""
import argparse
import os
import re
import secrets
import subprocess
import sys

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
PLACEHOLDER = re.compile(r"CHANGE-ME(?:-[A-Z0-9-]+)?")
# The dev profile's lines, commented out in .env.example: `# NAME=value` after its heading.
DEV_HEADING = "# --- Development"


def fill(text, dev, key_path):
    named = {}

    def secret(match):
        name = match.group(0)
        if name == "CHANGE-ME":
            return secrets.token_hex(32)
        return named.setdefault(name, secrets.token_hex(32))

    lines = []
    in_dev = False
    for line in text.splitlines():
        if line.startswith("# ---"):
            in_dev = line.startswith(DEV_HEADING)
        if dev and in_dev and re.match(r"# [A-Z][A-Z0-9_]*=", line):
            line = line[2:]
        if key_path and line.startswith("APNS_KEY_FILE="):
            line = "APNS_KEY_FILE=" + key_path
        lines.append(line if line.startswith("#") else PLACEHOLDER.sub(secret, line))
    return "\n".join(lines) + "\n"


def write_key(path):
    """A new P-256 private key in PKCS#8 PEM, as Apple's .p8 files are."""
    pem = subprocess.run(
        ["openssl", "genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256"],
        check=True, capture_output=True).stdout
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644), "wb") as f:
        # Readable by the containers' user (uid 10001) whatever the umask: compose mounts a file
        # secret with the host file's owner and mode (docs/deployment.md, "The APNs key").
        os.fchmod(f.fileno(), 0o644)
        f.write(pem)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dev", action="store_true", help="the dev profile: APNs simulator and example images")
    parser.add_argument("--out", default=".env", help="the file to write (default .env)")
    parser.add_argument("--key", help="APNS_KEY_FILE; with --dev a new key is written there if missing")
    parser.add_argument("--force", action="store_true", help="replace an existing --out file")
    args = parser.parse_args()

    if os.path.exists(args.out) and not args.force:
        print(f"new-env: {args.out} exists: its secrets may already be in use (Kafka's users are created "
              "when its data volume is first formatted); give --force to replace it", file=sys.stderr)
        return 1
    with open(os.path.join(REPO, ".env.example"), encoding="utf-8") as f:
        text = fill(f.read(), args.dev, args.key)
    key = args.key or re.search(r"^APNS_KEY_FILE=(.*)$", text, flags=re.M).group(1)
    if args.dev and not os.path.isabs(key):
        key = os.path.join(os.path.dirname(os.path.abspath(args.out)), key)
    if args.dev and not os.path.exists(key):
        write_key(key)
        print(f"new-env: wrote a new APNs signing key for the simulator to {key}", file=sys.stderr)
    elif args.dev and not os.stat(key).st_mode & 0o004:
        print(f"new-env: {key} is not readable by others: the containers' user (uid 10001) must read it "
              "(docs/deployment.md, \"The APNs key\")", file=sys.stderr)
    with open(os.open(args.out, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w", encoding="utf-8") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)
    print(f"new-env: wrote {args.out} (mode 600){' with the dev profile' if args.dev else ''}", file=sys.stderr)
    if not args.dev:
        print("new-env: put your APNs key where APNS_KEY_FILE says and set APNS_TEAM_ID, APNS_KEY_ID and "
              "ISLET_APNS_APPS (docs/deployment.md)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
