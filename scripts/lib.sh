# shellcheck shell=bash
# Helpers shared by the scripts in scripts/. Sourced, never run:
#
#   repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
#   . "$repo/scripts/lib.sh"
#
# Only functions: sourcing it sets no variable, shell option or trap of the caller.

# A free TCP port on 127.0.0.1: the kernel's choice, free when printed (not reserved).
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1]); s.close()'; }
