#!/usr/bin/env bash
# Install headless Chromium for the dashboard's browser test (tests/unit/proxy/test_dashboard.py).
#
# Idempotent: does nothing when chromium (or chromium-browser) is on PATH. Installs the Debian/Ubuntu
# package with apt-get, using sudo when not root. Exit status 1 when it could not be installed: the
# browser test then skips and says why; nothing else needs Chromium.
set -euo pipefail

# shellcheck source=lib/system.sh
. "$(dirname "$0")/lib/system.sh"

for name in chromium chromium-browser; do
    if command -v "$name" >/dev/null 2>&1; then
        log "already installed: $(command -v "$name")"
        exit 0
    fi
done
if ! command -v apt-get >/dev/null 2>&1; then
    log "no apt-get here; install Chromium by hand for the dashboard's browser test"
    exit 1
fi
log "installing chromium (Debian package)"
as_root apt-get update -qq
as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium
command -v chromium >/dev/null 2>&1 || { log "could not install chromium"; exit 1; }
log "installed $(command -v chromium)"
