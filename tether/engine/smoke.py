"""A one-token smoke check of the llama.cpp build on the bundled model (used by scripts/setup.sh)."""

from __future__ import annotations

import sys

__all__ = ["main"]


def main() -> None:
    from tether.engine.base import SamplingParams
    from tether.engine.llama_cpp import LlamaCppEngine
    from tether.engine.locate import bundled_model_path

    path = bundled_model_path()
    engine = LlamaCppEngine(path, n_ctx=256)
    events = list(engine.generate(engine.tokenize("Hello"), SamplingParams(max_tokens=1, temperature=0)))
    engine.close()
    sys.stderr.write(f"setup: llama.cpp build OK ({path.name}, {len(events) - 1} token)\n")
