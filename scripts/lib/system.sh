# Shared by the install scripts (sourced, not run): logging under the script's name and running a
# command as root (directly, or through sudo when not root).
# shellcheck shell=bash

log() { printf '%s: %s\n' "$(basename "$0" .sh)" "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo "$@"
    else
        log "need root to run: $*"
        return 1
    fi
}
