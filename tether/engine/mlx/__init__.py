"""The MLX engine (``mlx-lm``) and the GGUF -> MLX converter; install with ``pip install 'tether[mlx]'``.

Importing this package does not import MLX: ``is_mlx_model_dir`` and the converter's cache helpers work
without it, and ``MlxEngine`` is loaded on first access (an ``ImportError`` then says MLX is missing).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.engine.mlx.convert import cached_gguf_to_mlx, gguf_to_mlx
    from tether.engine.mlx.engine import MlxEngine

__all__ = ["MlxEngine", "cached_gguf_to_mlx", "gguf_to_mlx", "is_mlx_model_dir", "mlx_available"]


def is_mlx_model_dir(path: str | Path) -> bool:
    """True for a directory holding ``config.json`` and ``*.safetensors`` weights (what mlx-lm loads)."""
    p = Path(path)
    return p.is_dir() and (p / "config.json").is_file() and any(p.glob("*.safetensors"))


def mlx_available() -> bool:
    """Whether ``mlx`` and ``mlx_lm`` can be imported here (Apple silicon, or Linux with ``mlx[cpu]``)."""
    from tether.engine.mlx.runtime import preload_blas

    preload_blas()
    try:
        import mlx.core  # noqa: F401
        import mlx_lm  # noqa: F401
    except ImportError:
        return False
    return True


def __getattr__(name: str) -> Any:
    if name == "MlxEngine":
        from tether.engine.mlx.engine import MlxEngine

        return MlxEngine
    if name in ("gguf_to_mlx", "cached_gguf_to_mlx"):
        from tether.engine.mlx import convert

        return getattr(convert, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
