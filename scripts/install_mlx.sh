#!/usr/bin/env bash
# Install the MLX engine's dependencies into ./.venv and convert the bundled model once.
#
#   scripts/install_mlx.sh             # packages (+ OpenBLAS on Linux) and the bundled model converted
#   scripts/install_mlx.sh --no-convert
#
# macOS on Apple silicon: mlx (Metal), mlx-lm, gguf. Linux: mlx[cpu] (MLX's CPU backend), mlx-lm, gguf,
# and a system OpenBLAS (apt-get/dnf, when root or sudo is available): the mlx[cpu] wheels link the
# reference BLAS, 10-40x slower; tether preloads OpenBLAS before MLX (tether/engine/mlx/runtime.py).
# Skip the system package with TETHER_MLX_NO_SYSTEM_BLAS=1. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PIP="$VENV/bin/python -m pip"
MLX_VERSION=0.32.4
MLX_LM_VERSION=0.32.2
GGUF_VERSION=0.19.0
export PIP_DISABLE_PIP_VERSION_CHECK=1

log() { printf 'install_mlx: %s\n' "$*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then
        "$@"
    elif command -v sudo >/dev/null 2>&1; then
        sudo -n "$@"
    else
        return 1
    fi
}

[ -x "$VENV/bin/python" ] || { log "no $VENV: run scripts/setup.sh first"; exit 2; }

case "$(uname -s)/$(uname -m)" in
    Darwin/arm64) MLX_SPEC="mlx==$MLX_VERSION" ;;
    Linux/*) MLX_SPEC="mlx[cpu]==$MLX_VERSION" ;;
    *) log "MLX has no build for $(uname -s)/$(uname -m); the MLX engine is not available here"; exit 1 ;;
esac

if ! "$VENV/bin/python" -c 'import mlx.core, mlx_lm, gguf' 2>/dev/null; then
    log "installing $MLX_SPEC mlx-lm==$MLX_LM_VERSION gguf==$GGUF_VERSION"
    $PIP install -q "$MLX_SPEC" "mlx-lm==$MLX_LM_VERSION" "gguf==$GGUF_VERSION"
fi

if [ "$(uname -s)" = Linux ] && [ -z "${TETHER_MLX_NO_SYSTEM_BLAS:-}" ]; then
    if ! ldconfig -p 2>/dev/null | grep -q 'libopenblas\.so\.0'; then
        if command -v apt-get >/dev/null 2>&1; then
            { as_root apt-get update -qq && as_root env DEBIAN_FRONTEND=noninteractive \
                apt-get install -y -qq libopenblas0-pthread; } || log "could not install OpenBLAS: MLX stays on the slow reference BLAS"
        elif command -v dnf >/dev/null 2>&1; then
            as_root dnf install -y openblas-threads || log "could not install OpenBLAS: MLX stays on the slow reference BLAS"
        else
            log "no apt-get/dnf: install OpenBLAS (libopenblas.so.0) yourself, or set TETHER_MLX_BLAS=/path/to/it"
        fi
    fi
fi

"$VENV/bin/python" - <<'PYEOF'
from tether.engine.mlx import mlx_available
from tether.engine.mlx.runtime import blas_in_use

assert mlx_available(), "mlx / mlx-lm do not import"
import mlx.core as mx

x = mx.ones((64, 64)) @ mx.ones((64, 64))
assert float(x[0, 0]) == 64.0
print(f"install_mlx: mlx {mx.__version__} on {mx.default_device()}, BLAS: {blas_in_use()}")
PYEOF

if [ "${1:-}" != "--no-convert" ]; then
    dir=$("$VENV/bin/python" -m tether.engine.mlx.convert)
    log "bundled model as MLX: $dir"
fi
