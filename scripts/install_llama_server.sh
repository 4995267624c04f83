#!/usr/bin/env bash
# Builds llama-server from the llama.cpp source vendored in the llama-cpp-python sdist that setup.sh
# pins, so the remote-backend tests and benchmarks run the same llama.cpp as the embedded engine.
# Cached under ~/.cache/tether/llama-server/<version>/ (about 8 minutes on 2 cores the first time);
# prints the binary's path. Idempotent.
#
# Build flags follow scripts/setup.sh: TETHER_GPU=cuda adds GGML_CUDA, Apple silicon gets Metal,
# x86-64 without a GPU gets the explicit AVX2 set (the native build emits AMX some VMs lack).
# Usage: scripts/install_llama_server.sh [--where]   (--where: print the binary's path, build nothing)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=scripts/lib/system.sh
. scripts/lib/system.sh
# shellcheck source=scripts/lib/build_flags.sh
. scripts/lib/build_flags.sh

LLAMA_VERSION=${LLAMA_VERSION:-0.3.36}
CACHE=${TETHER_CACHE:-$HOME/.cache/tether}/llama-server/$LLAMA_VERSION-$(build_flavour)
BIN=$CACHE/bin/llama-server
PY=${PYTHON:-.venv/bin/python}

if [ "${1:-}" = "--where" ]; then
    echo "$BIN"
    exit 0
fi

if [ -x "$BIN" ] && "$BIN" --version >/dev/null 2>&1; then
    echo "$BIN"
    exit 0
fi
command -v cmake >/dev/null || { log "cmake is required (apt-get install cmake)"; exit 2; }

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
log "fetching the llama-cpp-python $LLAMA_VERSION sdist (its vendor/llama.cpp is the source)"
"$PY" -m pip download -q --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_VERSION" -d "$WORK" 2>/dev/null
tar -xzf "$WORK"/llama_cpp_python-"$LLAMA_VERSION".tar.gz -C "$WORK"
SRC=$WORK/llama_cpp_python-$LLAMA_VERSION/vendor/llama.cpp

log "building llama-server ($(build_flavour); about 8 minutes on 2 cores)"
# shellcheck disable=SC2046
cmake -S "$SRC" -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_CURL=OFF \
    -DLLAMA_BUILD_TOOLS=ON $(cmake_flags) >"$WORK/cmake.log" 2>&1 || { cat "$WORK/cmake.log" >&2; exit 1; }
cmake --build "$WORK/build" --target llama-server -j "$(nproc 2>/dev/null || echo 2)" >"$WORK/build.log" 2>&1 \
    || { tail -50 "$WORK/build.log" >&2; exit 1; }
mkdir -p "$CACHE/bin"
cp "$WORK/build/bin/llama-server" "$BIN.tmp" && mv "$BIN.tmp" "$BIN"
"$BIN" --version >/dev/null 2>&1 || { log "the built llama-server does not start"; exit 1; }
echo "$BIN"
