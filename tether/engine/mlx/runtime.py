"""Process-level MLX set-up: an optimized BLAS for MLX's Linux CPU backend.

The ``mlx[cpu]`` Linux wheels link the reference (netlib) BLAS they bundle, which makes float
matrix products 10-40x slower than OpenBLAS on the same core. ``preload_blas`` loads a system
OpenBLAS with ``RTLD_GLOBAL`` before ``mlx.core`` is first imported, so MLX's ``cblas_*`` calls bind
to it (the global scope is searched before a library's own dependencies). It must run before the
first ``import mlx.core`` in the process; every tether module that imports MLX calls it first.

``TETHER_MLX_BLAS`` controls it: ``auto`` (default: a system ``libopenblas`` if there is one),
``off``, or the path of a BLAS shared library. On macOS nothing is done (MLX uses Accelerate/Metal).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys
from pathlib import Path

import structlog

__all__ = ["blas_in_use", "preload_blas"]

log = structlog.get_logger(__name__)

_CANDIDATES = (
    "/usr/lib/x86_64-linux-gnu/libopenblas.so.0",
    "/usr/lib/aarch64-linux-gnu/libopenblas.so.0",
    "/usr/lib64/libopenblas.so.0",
)
_state: dict[str, str] = {}


def _find_openblas() -> str | None:
    for path in _CANDIDATES:
        if Path(path).exists():
            return path
    return ctypes.util.find_library("openblas")


def preload_blas() -> str:
    """Load the BLAS MLX should use (once per process); returns what MLX will use, for logs and info."""
    if "blas" in _state:
        return _state["blas"]
    choice = os.environ.get("TETHER_MLX_BLAS", "auto").strip() or "auto"
    result = "bundled"
    if sys.platform.startswith("linux") and choice != "off":
        if "mlx.core" in sys.modules:
            result = "bundled (mlx.core was imported before tether could preload a BLAS)"
        else:
            path = _find_openblas() if choice == "auto" else choice
            if path:
                try:
                    ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                    result = path
                except OSError as exc:
                    log.warning("mlx_blas_preload_failed", path=path, error=str(exc))
    elif sys.platform == "darwin":
        result = "accelerate"
    _state["blas"] = result
    return result


def blas_in_use() -> str:
    """What ``preload_blas`` settled on (``"unset"`` before it ran)."""
    return _state.get("blas", "unset")
