#!/usr/bin/env bash
# Installs the real coding clients the `clients` tests drive, project-locally, idempotently:
#   .cache/clients/node_modules/.bin/opencode   (npm: opencode-ai)
#   .cache/clients/node_modules/.bin/cn         (npm: @continuedev/cli)
#   .cache/clients/node_modules/.bin/mcp-server-filesystem  (npm: @modelcontextprotocol/server-filesystem,
#                                        the reference MCP server the MCP tests drive)
#   .cache/clients/aider-venv/bin/aider         (PyPI: aider-chat, in its own venv: its pins clash with ours)
# A second run only checks. Writes .cache/clients/installed.json on success (the tests read it).
# Usage: scripts/install_clients.sh            (needs node >= 20 with npm, and python >= 3.10)
# Versions may be overridden: OPENCODE_VERSION, CN_VERSION, AIDER_VERSION.
set -euo pipefail
cd "$(dirname "$0")/.."

OPENCODE_VERSION=${OPENCODE_VERSION:-1.18.33}
CN_VERSION=${CN_VERSION:-1.5.47}
MCP_FS_VERSION=${MCP_FS_VERSION:-2026.8.31}
AIDER_VERSION=${AIDER_VERSION:-0.86.2}
PY=${PYTHON:-python3}
DIR=.cache/clients
export PIP_DISABLE_PIP_VERSION_CHECK=1 npm_config_fund=false npm_config_audit=false npm_config_update_notifier=false

mkdir -p "$DIR"
rm -f "$DIR/installed.json"

if ! command -v npm >/dev/null 2>&1; then
  echo "install_clients: npm is required (node >= 20)" >&2
  exit 2
fi
node_major=$(node -p 'process.versions.node.split(".")[0]')
if [ "$node_major" -lt 20 ]; then
  echo "install_clients: node >= 20 is required (found $(node --version))" >&2
  exit 2
fi

npm_version() {  # installed version of $1 under $DIR, or nothing
  node -e 'try { console.log(require(process.argv[1] + "/package.json").version) } catch (e) {}' \
    "$PWD/$DIR/node_modules/$1" 2>/dev/null || true
}

[ -f "$DIR/package.json" ] || echo '{"name": "tether-clients", "private": true}' >"$DIR/package.json"
want=()
[ "$(npm_version opencode-ai)" = "$OPENCODE_VERSION" ] || want+=("opencode-ai@$OPENCODE_VERSION")
[ "$(npm_version @continuedev/cli)" = "$CN_VERSION" ] || want+=("@continuedev/cli@$CN_VERSION")
[ "$(npm_version @modelcontextprotocol/server-filesystem)" = "$MCP_FS_VERSION" ] ||
  want+=("@modelcontextprotocol/server-filesystem@$MCP_FS_VERSION")
if [ ${#want[@]} -gt 0 ]; then
  echo "install_clients: npm install ${want[*]}" >&2
  (cd "$DIR" && npm install --silent --no-progress "${want[@]}")
fi

AIDER_VENV=$DIR/aider-venv
if ! "$AIDER_VENV/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('aider-chat') != '$AIDER_VERSION')" 2>/dev/null; then
  echo "install_clients: pip install aider-chat==$AIDER_VERSION into $AIDER_VENV (a few minutes)" >&2
  [ -x "$AIDER_VENV/bin/python" ] || "$PY" -m venv "$AIDER_VENV"
  "$AIDER_VENV/bin/python" -m pip install -q "aider-chat==$AIDER_VERSION"
fi

# Smoke checks: each binary starts and reports its version (no network needed for that).
export OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 CONTINUE_TELEMETRY_ENABLED=0
oc=$("$DIR/node_modules/.bin/opencode" --version)
cn=$("$DIR/node_modules/.bin/cn" --version)
ai=$("$AIDER_VENV/bin/aider" --version --no-check-update --no-analytics 2>/dev/null | tail -n 1)
printf '{"opencode": "%s", "cn": "%s", "aider": "%s"}\n' "$oc" "$cn" "$ai" >"$DIR/installed.json"
echo "install_clients: ready: $(cat "$DIR/installed.json")" >&2
