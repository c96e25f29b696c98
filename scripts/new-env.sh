#!/usr/bin/env bash
# Writes .env for docker compose from .env.example, every placeholder secret replaced by a new one
# (docs/deployment.md, "First start"). Refuses to replace an existing file unless --force.
#
#   scripts/new-env.sh                 # production APNs: then add your .p8 key and team ids
#   scripts/new-env.sh --dev           # the dev profile: APNs simulator (a new key in ./secrets/), example images
#   scripts/new-env.sh --out FILE --key KEYFILE [--dev] [--force]
set -euo pipefail
exec python3 "$(dirname "${BASH_SOURCE[0]}")/new_env.py" "$@"
