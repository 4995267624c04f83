"""MLX engine vs llama.cpp engine on the bundled model, same prompt, same process: TTFT and decode tok/s.

    .venv/bin/python -m benchmarks.bench_mlx                       # float32 MLX directory
    .venv/bin/python -m benchmarks.bench_mlx --quantized           # also MLX 4-bit (exact Q4_1 repack)
    .venv/bin/python -m benchmarks.bench_mlx --threads 2 --prompt-tokens 512 --new-tokens 64

Rounds alternate between the engines so that load from other processes hits both alike; each round
changes the prompt's first tokens so neither engine can reuse a cached prefix. Prints one line per
engine (medians) and the MLX/llama.cpp ratios. MLX's home is Apple silicon (Metal GPU, unified
memory); on a Linux CPU it runs its CPU backend, so these numbers say nothing about a Mac.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Sequence
from dataclasses import dataclass

TEXT = "The history of tool use in small language models is short but instructive. " * 40


@dataclass
class Result:
    name: str
    ttft_s: list[float]
    decode_tok_s: list[float]
    prompt_tokens: int

    def line(self) -> str:
        ttft, dec = statistics.median(self.ttft_s), statistics.median(self.decode_tok_s)
        return (
            f"{self.name:<14} prompt={self.prompt_tokens} ttft_ms={ttft * 1000:.0f} "
            f"prefill_tok_s={self.prompt_tokens / ttft:.1f} decode_tok_s={dec:.1f}"
        )


def _one(engine: object, ids: Sequence[int], new_tokens: int) -> tuple[float, float]:
    from tether.engine.base import Engine, SamplingParams, Token

    assert isinstance(engine, Engine)
    start = time.perf_counter()
    first_at = None
    n = 0
    for ev in engine.generate(list(ids), SamplingParams(max_tokens=new_tokens, temperature=0)):
        if isinstance(ev, Token) and ev.id >= 0:
            n += 1
            if first_at is None:
                first_at = time.perf_counter()
    end = time.perf_counter()
    assert first_at is not None and n > 1, "the model stopped at once; use another prompt"
    return first_at - start, (n - 1) / (end - first_at)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2, help="llama.cpp threads and OPENBLAS_NUM_THREADS")
    parser.add_argument("--prompt-tokens", type=int, default=256)
    parser.add_argument("--new-tokens", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quantized", action="store_true", help="also run the 4-bit MLX directory")
    args = parser.parse_args()
    os.environ.setdefault("OPENBLAS_NUM_THREADS", str(args.threads))  # before MLX loads OpenBLAS

    from tether.engine.llama_cpp import LlamaCppEngine
    from tether.engine.locate import bundled_model_path
    from tether.engine.mlx.convert import cached_gguf_to_mlx
    from tether.engine.mlx.engine import MlxEngine
    from tether.engine.mlx.runtime import blas_in_use

    gguf = bundled_model_path()
    engines: dict[str, object] = {"llama.cpp": LlamaCppEngine(gguf, n_ctx=4096, n_threads=args.threads)}
    engines["mlx-f32"] = MlxEngine(cached_gguf_to_mlx(gguf), n_ctx=4096)
    if args.quantized:
        engines["mlx-q4"] = MlxEngine(cached_gguf_to_mlx(gguf, quantize=True), n_ctx=4096)
    llama = engines["llama.cpp"]
    assert isinstance(llama, LlamaCppEngine)
    prompt = llama.tokenize(TEXT)[: args.prompt_tokens]
    import mlx.core as mx

    print(f"mlx {mx.__version__} device={mx.default_device()} blas={blas_in_use()} threads={args.threads}")
    results = {name: Result(name, [], [], len(prompt)) for name in engines}
    for engine in engines.values():  # warm-up: first-call allocations
        _one(engine, [*prompt[:8]], 4)
    for r in range(args.rounds):
        ids = [prompt[0] + r + 1, prompt[1] + r + 1, *prompt[2:]]  # a fresh prefix every round
        for name, engine in engines.items():
            ttft, dec = _one(engine, ids, args.new_tokens)
            results[name].ttft_s.append(ttft)
            results[name].decode_tok_s.append(dec)
    for res in results.values():
        print(res.line())
    base = results["llama.cpp"]
    for name, res in results.items():
        if name == "llama.cpp":
            continue
        ttft_ratio = statistics.median(res.ttft_s) / statistics.median(base.ttft_s)
        dec_ratio = statistics.median(res.decode_tok_s) / statistics.median(base.decode_tok_s)
        print(
            f"{name} / llama.cpp: ttft x{ttft_ratio:.2f} (higher is slower), decode x{dec_ratio:.2f} (higher is faster)"
        )


if __name__ == "__main__":
    main()
