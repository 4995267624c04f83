#!/usr/bin/env bash
# Install bubblewrap (bwrap), the sandbox tether runs tool commands in, and check that it works.
#
# Idempotent: does nothing but the check when bwrap is already on PATH. Installs with
# apt-get (Debian/Ubuntu), dnf, apk or pacman when it is missing, using sudo when not root.
# Exit status: 0 when bwrap is installed and can create a sandbox; 1 when it could not be
# installed; 2 when it is installed but cannot create namespaces here (see docs/sandbox.md).
set -euo pipefail

# shellcheck source=lib/system.sh
. "$(dirname "$0")/lib/system.sh"

install_bwrap() {
    if command -v apt-get >/dev/null 2>&1; then
        as_root apt-get update -qq
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq bubblewrap
    elif command -v dnf >/dev/null 2>&1; then
        as_root dnf install -y bubblewrap
    elif command -v apk >/dev/null 2>&1; then
        as_root apk add --no-cache bubblewrap
    elif command -v pacman >/dev/null 2>&1; then
        as_root pacman -S --noconfirm --needed bubblewrap
    else
        log "no supported package manager found; install bubblewrap by hand"
        return 1
    fi
}

if command -v bwrap >/dev/null 2>&1; then
    log "bwrap already installed: $(command -v bwrap) ($(bwrap --version 2>/dev/null || echo 'unknown version'))"
else
    log "bwrap not found; installing bubblewrap"
    if ! install_bwrap || ! command -v bwrap >/dev/null 2>&1; then
        log "could not install bubblewrap"
        exit 1
    fi
    log "installed $(command -v bwrap) ($(bwrap --version))"
fi

# The same namespace set tether uses (user, pid, net, ipc, uts, cgroup) with a read-only /usr.
check=(bwrap --unshare-all --unshare-user --disable-userns --die-with-parent --new-session
       --ro-bind /usr /usr)
for d in /bin /sbin /lib /lib32 /lib64 /libx32; do
    if [ -L "$d" ]; then
        check+=(--symlink "$(readlink "$d")" "$d")
    elif [ -d "$d" ]; then
        check+=(--ro-bind "$d" "$d")
    fi
done
check+=(--proc /proc --dev /dev --tmpfs /tmp -- /bin/sh -c 'exit 0')
if err=$("${check[@]}" 2>&1); then
    log "bwrap can create a sandbox here"
else
    log "bwrap is installed but cannot create a sandbox here: ${err}"
    log "see docs/sandbox.md, section 'When bubblewrap cannot create namespaces'"
    exit 2
fi
