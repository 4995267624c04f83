#!/usr/bin/env bash
# Install redis-server for the Redis session-store tests (tests/unit/workflows/test_redis_*.py and
# tests/unit/proxy/test_replicas.py start their own throwaway server on a free port).
#
# Idempotent: does nothing when redis-server is on PATH. Installs the Debian/Ubuntu package with
# apt-get, using sudo when not root. Exit status 1 when it could not be installed: the Redis tests
# then skip and say why (outside CI; under CI=1 they fail instead).
set -euo pipefail

# shellcheck source=lib/system.sh
. "$(dirname "$0")/lib/system.sh"

if command -v redis-server >/dev/null 2>&1; then
    log "already installed: $(command -v redis-server) ($(redis-server --version | cut -d' ' -f3))"
    exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
    log "no apt-get here; install redis-server by hand for the Redis session-store tests"
    exit 1
fi
log "installing redis-server (Debian package)"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends redis-server
command -v redis-server >/dev/null 2>&1 || { log "could not install redis-server"; exit 1; }
log "installed $(command -v redis-server) ($(redis-server --version | cut -d' ' -f3))"
