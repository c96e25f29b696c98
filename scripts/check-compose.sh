#!/usr/bin/env bash
# Validates docker-compose.yml without a Docker engine, then checks it against the code:
#
#   1. the compose specification's JSON schema (check-jsonschema's copy, `vendor.compose-spec`);
#   2. a compose implementation's `config` (podman-compose, dry run: no engine needed), which
#      interpolates the variables with .env.example, resolves every profile, and refuses unknown
#      volumes, secrets or services;
#   3. scripts/check_compose.py on that normalized file: products, variables, topics, ACLs, health
#      checks, and each Kafka node's properties (read back from deploy/kafka-node.sh --print) held
#      to Kafka's start-up rules — for the file alone and with docker-compose.ha.yml;
#   4. scripts/test_check_compose.py first: each of those Kafka rules refuses a file that breaks it;
#   5. scripts/compose_start.py, for each variant: every Islet service started as a process with the
#      environment, secrets and command compose gives it (from an .env that scripts/new-env.sh
#      --dev writes, as an operator's first start would), on a local broker, until its health
#      check answers; then the demo's scenarios through them. It needs the build (`swift build`,
#      done here) and prints what it had to change (host names, ports, paths, Kafka's SASL).
#
# Both Python tools are installed from PyPI into $ISLET_TOOLS/compose-check (default .tools/),
# pinned; nothing system-wide. Products listed in ISLET_COMPOSE_PENDING_PRODUCTS (comma-separated)
# are reported as pending instead of failing.
#
#   scripts/check-compose.sh
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
tools=${ISLET_TOOLS:-$repo/.tools}
run_dir=${ISLET_RUN_DIR:-$repo/.islet-run}
mkdir -p "$run_dir"

CHECK_JSONSCHEMA_VERSION=0.39.0
PODMAN_COMPOSE_VERSION=1.6.0
site="$tools/compose-check"
stamp="$site/.installed-$CHECK_JSONSCHEMA_VERSION-$PODMAN_COMPOSE_VERSION"

if [ ! -f "$stamp" ]; then
  echo "[check-compose] installing check-jsonschema $CHECK_JSONSCHEMA_VERSION and podman-compose $PODMAN_COMPOSE_VERSION into ${site#"$repo"/}" >&2
  rm -rf "$site"
  python3 -m pip install -q --disable-pip-version-check --no-input --target "$site" \
    "check-jsonschema==$CHECK_JSONSCHEMA_VERSION" "podman-compose==$PODMAN_COMPOSE_VERSION" >&2
  touch "$stamp"
fi
export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"

echo "-- compose-spec schema"
python3 -m check_jsonschema --builtin-schema vendor.compose-spec docker-compose.yml docker-compose.ha.yml

echo "-- the rule checks themselves (a file that breaks each rule is refused)"
python3 scripts/test_check_compose.py

package="$run_dir/package.json"
# Its own scratch path: no wait for a build that holds .build/.
swift package dump-package --scratch-path "$run_dir/dump-package" >"$package"

# The normalized file of a variant (default: the file alone, one broker; ha: with
# docker-compose.ha.yml, three), its variables from an env file only: the caller's own environment
# must not hide a missing default. Every profile.
normalized_config() {  # variant, env file
  local files=(-f docker-compose.yml)
  [ "$1" = ha ] && files+=(-f docker-compose.ha.yml)
  env -i PATH="$PATH" PYTHONPATH="$PYTHONPATH" HOME="${HOME:-/tmp}" \
    python3 -c 'import sys, podman_compose; sys.exit(podman_compose.main())' \
    --dry-run --env-file "$2" "${files[@]}" --profile dev config
}

for variant in default ha; do
  echo "-- $variant: podman-compose config (every profile, variables from .env.example)"
  normalized="$run_dir/compose.$variant.config.yml"
  normalized_config "$variant" .env.example >"$normalized"
  echo "ok -- $(python3 -c 'import sys, yaml; print(len(yaml.safe_load(open(sys.argv[1]))["services"]))' "$normalized") services"
  echo "-- $variant: the file against the code and Kafka's rules"
  python3 scripts/check_compose.py "$normalized" "$package" --pending-products "${ISLET_COMPOSE_PENDING_PRODUCTS:-}"
done

# 5. The services under compose's own environment (the binaries of `swift build`; a broker each).
# ISLET_COMPOSE_START=0 leaves it out (scripts/test.sh --quick).
if [ "${ISLET_COMPOSE_START:-1}" = 0 ]; then
  echo "-- the services under compose's environment: not started (ISLET_COMPOSE_START=0)"
  exit 0
fi
echo "-- the services under compose's environment"
swift build 2>&1 | grep -E "error|Compiling|Build complete" | grep -v "^\[" | tail -3
bin=$(swift build --show-bin-path)
rm -rf "$run_dir/compose-start" && mkdir -p "$run_dir/compose-start"
env_file="$run_dir/compose-start/compose.env"
python3 scripts/new_env.py --dev --out "$env_file" --key "$run_dir/compose-start/AuthKey.p8"
for variant in default ha; do
  echo "-- $variant: every service started as compose configures it, then the demo's scenarios"
  config="$run_dir/compose-start/compose.$variant.yml"
  normalized_config "$variant" "$env_file" >"$config"
  (
    eval "$(ISLET_RUN_DIR="$run_dir/compose-start" scripts/broker.sh)"
    trap 'kill "$ISLET_BROKER_PID" 2>/dev/null || true' EXIT
    # kafka-init's part: the topics (the local broker has no users or ACLs to grant).
    "$bin/islet-demo" setup --bootstrap "$ISLET_KAFKA_BOOTSTRAP" >/dev/null
    python3 scripts/compose_start.py "$config" --bin "$bin" --bootstrap "$ISLET_KAFKA_BOOTSTRAP" \
      --run-dir "$run_dir/compose-start/$variant" --play
    if [ "$variant" = default ]; then
      echo "-- the start check itself: the file broken one thing at a time fails it, in the service's words"
      python3 scripts/compose_start.py "$config" --bin "$bin" --bootstrap "$ISLET_KAFKA_BOOTSTRAP" \
        --run-dir "$run_dir/compose-start/self-test" --self-test
    fi
  )
done
# SASL/SCRAM: the local broker cannot authenticate a user (tansu 0.6 keeps none in memory), but with
# --authentication it makes every client log in and refuses the login: each service logs in with
# the file's mechanism and user, and its /health/ready says that Kafka refused it.
echo "-- default: each service logs in with the file's SASL settings; a refused login is said by /health/ready"
(
  eval "$(ISLET_RUN_DIR="$run_dir/compose-start" ISLET_BROKER_AUTHENTICATION=1 scripts/broker.sh)"
  trap 'kill "$ISLET_BROKER_PID" 2>/dev/null || true' EXIT
  python3 scripts/compose_start.py "$run_dir/compose-start/compose.default.yml" --bin "$bin" --bootstrap "$ISLET_KAFKA_BOOTSTRAP" \
    --run-dir "$run_dir/compose-start/refused-logins" --refused-logins
)
