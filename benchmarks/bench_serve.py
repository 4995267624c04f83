"""tether vs llama-cpp-python's server on the bundled model, side by side in one run.

Prints decode tok/s, time to first token, and cold vs warm TTFT for a ~1,000-token
shared system + tools prompt, each as a tether/llama.cpp-server ratio.
Usage: .venv/bin/python -m benchmarks.bench_serve [--rounds 5] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import httpx

from benchmarks._servers import llama_cpp_server, tether_server
from tether.engine.locate import bundled_model_path

MODEL = "smollm2-135m-instruct"
LONG_SYSTEM = "You are a careful assistant for a software team. Follow the house rules. " + " ".join(
    f"Rule {i}: keep answers short, cite the file you read, and never guess a path." for i in range(60)
)


def stream_once(base: str, messages: list[dict[str, str]], max_tokens: int) -> tuple[float, float, int]:
    """(ttft seconds, decode seconds after the first token, content chunks) for one streamed request.

    Both servers send one chunk per decoded token, so chunks count tokens the same way on each side
    (llama-cpp-python's server does not report usage when streaming).
    """
    body = {
        "model": MODEL,
        "messages": messages,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    start = time.perf_counter()
    first = last = None
    tokens = 0
    with httpx.stream("POST", f"{base}/chat/completions", json=body, timeout=300) as r:
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            choices = chunk.get("choices") or []
            if choices and choices[0]["delta"].get("content"):
                tokens += 1
                now = time.perf_counter()
                first = first or now
                last = now
    assert first is not None and last is not None
    return first - start, last - first, tokens


def one_round(base: str, i: int) -> dict[str, float]:
    ttft, decode, n = stream_once(
        base, [{"role": "user", "content": f"Write a story about a robot number {i}."}], 128
    )
    system = {"role": "system", "content": f"[session {i}] {LONG_SYSTEM}"}
    cold = stream_once(base, [system, {"role": "user", "content": "Which rule is first?"}], 8)[0]
    warm = stream_once(base, [system, {"role": "user", "content": "Which rule is last?"}], 8)[0]
    return {
        "decode_tok_s": (n - 1) / decode if decode > 0 else 0.0,
        "ttft_s": ttft,
        "cold_ttft_s": cold,
        "warm_ttft_s": warm,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--ctx", type=int, default=4096)
    args = parser.parse_args()
    model = str(bundled_model_path())
    rounds: dict[str, list[dict[str, float]]] = {"tether": [], "llama_cpp": []}
    with (
        tether_server(model, ctx=args.ctx, threads=args.threads) as tether_base,
        llama_cpp_server(model, ctx=args.ctx, threads=args.threads) as llama_base,
    ):
        bases = {"tether": tether_base, "llama_cpp": llama_base}
        for base in bases.values():
            stream_once(base, [{"role": "user", "content": "warm up"}], 4)
        # Both servers stay up; rounds alternate which goes first so machine noise hits both alike.
        for i in range(args.rounds):
            order = ["tether", "llama_cpp"] if i % 2 == 0 else ["llama_cpp", "tether"]
            for name in order:
                rounds[name].append(one_round(bases[name], i))
    t = {k: statistics.median(r[k] for r in rounds["tether"]) for k in rounds["tether"][0]}
    lc = {k: statistics.median(r[k] for r in rounds["llama_cpp"]) for k in rounds["llama_cpp"][0]}
    print(f"{'metric':<16}{'tether':>12}{'llama_cpp':>12}{'ratio':>10}")
    for key in ("decode_tok_s", "ttft_s", "cold_ttft_s", "warm_ttft_s"):
        print(f"{key:<16}{t[key]:>12.4f}{lc[key]:>12.4f}{t[key] / lc[key]:>10.3f}")
    print(
        f"warm/cold tether: {t['warm_ttft_s'] / t['cold_ttft_s']:.3f}   "
        f"llama_cpp: {lc['warm_ttft_s'] / lc['cold_ttft_s']:.3f}"
    )


if __name__ == "__main__":
    main()
