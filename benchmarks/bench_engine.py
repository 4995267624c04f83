"""In-process llama.cpp engine speed on the bundled model: prefill and decode tok/s per thread count.

Run it with different interpreters to compare llama.cpp builds side by side, e.g.
    .venv/bin/python -m benchmarks.bench_engine --threads 1 2
    /tmp/venv512/bin/python -m benchmarks.bench_engine --threads 2     # an AVX-512 build
Prints one line per setting; the caller divides to get ratios.

    .venv/bin/python -m benchmarks.bench_engine --threads 2 --embedder-threads 0 1 2

runs the engine beside the bundled sentence-embedding model given that many threads (0: none),
after one embedding call from a thread that lives on beside the generating one, as in the server, and prints decode tok/s
against the engine alone: the cost of a second OpenMP team in the process.
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

from tether.engine.base import SamplingParams, Token
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.locate import bundled_model_path

TEXT = "The history of tool use in small language models is short but instructive. " * 40


def measure(threads: int, rounds: int, embedder_threads: int = 0) -> tuple[float, float]:
    engine = LlamaCppEngine(bundled_model_path(), n_ctx=4096, n_threads=threads)
    embedder = None
    if embedder_threads:
        from tether.engine.embedding import LlamaEmbedder
        from tether.engine.locate import bundled_embedding_model_path

        embedder = LlamaEmbedder(bundled_embedding_model_path(), n_threads=embedder_threads)
        # From a thread that lives on beside the one generating, as the server's executor threads do:
        # its OpenMP team (if it has one) outlives the call.
        pool = ThreadPoolExecutor(1)
        pool.submit(embedder.embed, ["what is the weather in Riga"]).result()
    prompt = engine.tokenize(TEXT)[:1000]
    prefill, decode = [], []
    for i in range(rounds):
        ids = [*prompt[:-1], prompt[-1] + i + 1]  # defeat prefix reuse: the first token differs per round
        ids[1] = ids[1] + i + 1
        start = time.perf_counter()
        first_at = None
        n = 0
        for ev in engine.generate(ids, SamplingParams(max_tokens=128, temperature=0)):
            if isinstance(ev, Token) and ev.id >= 0:
                n += 1
                if first_at is None:
                    first_at = time.perf_counter()
        end = time.perf_counter()
        assert first_at is not None
        prefill.append(len(ids) / (first_at - start))
        decode.append((n - 1) / (end - first_at))
    engine.close()
    if embedder is not None:
        pool.shutdown()
        embedder.close()
    return statistics.median(prefill), statistics.median(decode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--embedder-threads", type=int, nargs="*", default=[], help="embedder beside the engine (0: none)"
    )
    args = parser.parse_args()
    import llama_cpp

    info = llama_cpp.llama_print_system_info().decode()
    print(f"llama.cpp system info: {info.strip()}")
    for threads in args.threads:
        alone = None
        for emb in args.embedder_threads or [0]:
            pre, dec = measure(threads, args.rounds, emb)
            alone = dec if alone is None else alone
            ratio = f" decode_vs_first={dec / alone:.2f}x" if args.embedder_threads else ""
            print(
                f"threads={threads} embedder_threads={emb} prefill_tok_s={pre:.1f} decode_tok_s={dec:.1f}{ratio}"
            )


if __name__ == "__main__":
    main()
