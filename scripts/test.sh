#!/usr/bin/env bash
# The test command: installs what is missing, builds, checks the compose file (and starts the
# services as it configures them), checks the docs' examples, starts a broker on a free loopback port, runs every
# test (unit, integration against the broker, fault tests on librdkafka's mock cluster) and stops
# the broker whatever happens. Extra arguments go to `swift test` (e.g. --filter Consumer).
#
#   scripts/test.sh            what CI runs
#   scripts/test.sh --quick    the edit-test loop: unit and integration tests only (no full-size
#                              budget test, no end-to-end suites, no fuzz build, no demo)
set -euo pipefail

quick=0
if [ "${1:-}" = "--quick" ]; then
  quick=1
  shift
fi
# The whole run: no arguments for `swift test`, and not --quick.
full=0
[ "$#" -eq 0 ] && [ "$quick" = 0 ] && full=1

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"
export ISLET_RUN_DIR=${ISLET_RUN_DIR:-$repo/.islet-run}
mkdir -p "$ISLET_RUN_DIR"

scripts/bootstrap.sh

echo "== build"
swift build --build-tests

echo "== compose file"
# Validates docker-compose.yml and checks it against the code and Kafka's rules (no Docker engine
# needed), then starts every service as compose configures it, on a broker of its own, and plays
# the demo's scenarios through them (not with --quick: ISLET_COMPOSE_START=0).
if [ "$quick" = 1 ]; then ISLET_COMPOSE_START=0 scripts/check-compose.sh; else scripts/check-compose.sh; fi

echo "== doc examples"
# README's and docs' curl and grpcurl examples against the routes, their credentials and the protos
# (PyYAML from the compose check's tools). Two lines, not `a && b`: under set -e a failure left of
# && would not stop the script.
python3 scripts/test_check_doc_examples.py
python3 scripts/check_doc_examples.py

echo "== broker"
eval "$(scripts/broker.sh)"
export ISLET_KAFKA_BOOTSTRAP
# SIGCONT first: a stopped process does not act on SIGTERM.
stop_broker() {
  kill -CONT "$ISLET_BROKER_PID" 2>/dev/null || true
  kill "$ISLET_BROKER_PID" 2>/dev/null || true
  wait "$ISLET_BROKER_PID" 2>/dev/null || true
}
trap stop_broker EXIT INT TERM
echo "tansu on $ISLET_KAFKA_BOOTSTRAP (pid $ISLET_BROKER_PID)"

# Integration tests fail instead of skipping when this is set and the broker is missing.
export ISLET_REQUIRE_BROKER=1

echo "== tests"
# Without arguments the budget test runs once, at full size, in its own step below.
skip=()
[ "$full" = 1 ] && skip=(--skip BudgetLoadTests)
swift test --skip-build ${skip[@]+"${skip[@]}"} "$@"

# The dispatch engine's budget test at the issue's full size — 1,000 activities, an update a second
# each for a simulated hour (3.6 million requests, about 7 minutes in a debug build) — on its own:
# beside the other suites it would take their CPU (`swift test` alone runs it at 100 activities).
if [ "$full" = 1 ]; then
  echo "== budget under load, full size (1,000 activities × 3,600 simulated seconds)"
  ISLET_BUDGET_LOAD_ACTIVITIES=1000 ISLET_BUDGET_LOAD_SECONDS=3600 swift test --skip-build --filter BudgetLoadTests
fi

# The end-to-end suites (Tests/EndToEndTests): the product as processes — happy paths, kill -9 and
# SIGTERM under load, the ledger of every push request — each suite on a broker it starts for
# itself (scripts/broker.sh), unless a subset of the tests was asked for. The broker above is not
# needed for them.
if [ "$full" = 1 ]; then
  echo "== end to end (each suite on a broker of its own)"
  stop_broker
  ISLET_E2E=1 ISLET_BIN_DIR="$(swift build --show-bin-path)" swift test --skip-build --filter EndToEnd
fi

# A bounded run of every fuzzer (libFuzzer; five targets, ISLET_FUZZ_SECONDS each) after their
# instrumented build (a second full build, in .build-fuzz: about 20 minutes on a fresh 2-core
# machine, incremental later). Every target's seeds and saved failures
# are also replayed by FuzzTests in every run; scripts/fuzz.sh runs the fuzzers for longer.
# ISLET_TEST_FUZZ=0 leaves this step out (a quicker local run).
if [ "$full" = 1 ] && [ "${ISLET_TEST_FUZZ:-1}" = 1 ]; then
  echo "== fuzz (every target, ${ISLET_FUZZ_SECONDS:-8} s each)"
  scripts/fuzz.sh "${ISLET_FUZZ_SECONDS:-8}"
fi

# The demo, its three scenarios through every service and the simulator, then stop: the whole
# pipeline end to end (unless a subset of the tests was asked for).
if [ "$full" = 1 ]; then
  echo "== demo (--exit)"
  scripts/demo.sh --exit
fi
