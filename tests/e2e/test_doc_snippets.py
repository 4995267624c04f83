"""Every code block in README.md and docs/ is accounted for, and the ones a user pastes run.

Each fenced block is one of:

* **run**: Python and ``curl`` blocks, run as written against ``tether serve``'s app on the bundled
  model (and its embedding model) over a real socket, the address put in for
  ``127.0.0.1:8000``; a block must finish without an error and, where it prints, print something;
* **parsed**: config files (TOML, YAML, JSON) read by the loader that reads them for real;
* **not run here**, with the reason (:data:`NOT_RUN`): commands that build, install, serve forever,
  need hardware or a service CI does not have, or run for hours (the evals and benchmarks are their
  own commands); and blocks that are output, diagrams or signatures rather than input.

A new block that fits none of these fails the test, so a doc cannot gain an unchecked snippet.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.support.socket_server import serving

pytestmark = pytest.mark.model

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)

# (page, the block's first line, up to its first 40 characters) -> why it does not run in this test.
BUILD = "builds or installs (CI runs it through `make test`)"
SERVE = "starts a server that runs until stopped (the served app is what the run blocks use)"
LONG = "an eval or a benchmark: its own command, minutes to hours (docs/evals.md, docs/benchmarks.md)"
NOT_RUN: dict[tuple[str, str], str] = {
    ("README.md", "make serve   # fresh machine: builds .venv ("): BUILD,
    ("README.md", ".venv/bin/tether serve                     "): SERVE,
    ("README.md", "make setup          # idempotent: .venv, ll"): BUILD,
    ("backends.md", "# llama.cpp's own server, on a GPU box (a"): "needs a GPU box running llama-server",
    ("backends.md", "vllm serve MODEL --enable-tokenizer-info-"): "needs a vLLM server (make test-vllm runs one)",
    ("backends.md", "tether serve --backend http://127.0.0.1:80"): SERVE,
    ("backends.md", "ollama pull qwen2.5:0.5b"): "needs Ollama, which CI does not install",
    ("batching.md", "tether serve                            "): SERVE,
    ("mcp.md", "tether serve --work-dir ~/project --mcp-"): "serves; tests/model/test_mcp_model.py runs it",
    ("batching.md", "make bench-batch ARGS=\"--rounds 3 --tokens"): LONG,
    ("clients.md", "tether launch opencode                    "): "runs interactive clients (tests/clients run them)",
    ("clients.md", "opencode run --format json \"Create hello.t"): "tests/clients/test_bundled_model.py runs it",
    ("clients.md", "cn --config continue-config.yaml -p --auto"): "tests/clients/test_bundled_model.py runs it",
    ("clients.md", "OPENAI_API_BASE=http://127.0.0.1:8000/v1 O"): "tests/clients/test_bundled_model.py runs it",
    ("clients.md", "ANTHROPIC_BASE_URL=http://127.0.0.1:8000 \\"): "needs Claude Code, which CI does not install",
    ("clients.md", "make test-clients                         "): BUILD,
    ("configuration.md", "tether serve                          # "): SERVE,
    ("prefix-cache.md", "tether serve --prefix-cache-dir ~/.cache"): SERVE,
    ("configuration.md", "$ TETHER_SLOTS=4 tether config show --pro"): "output (tests/unit/test_config_file.py)",
    ("configuration.md", "tether: error: /home/me/proj/tether.toml:"): "output (tests/unit/test_config_file.py)",
    ("deploy.md", "┌───────────── tether replica 1 ─┐"): "a diagram",
    ("deploy.md", "export TETHER_API_KEY=…      # a public b"): "needs Docker Compose",
    ("deploy.md", "# redis.conf"): "a Redis config excerpt (tests/unit/workflows run Redis)",
    ("deploy.md", "memory ≈ live sessions × bytes per sessio"): "a formula",
    ("deploy.md", "# nginx.conf: Docker's DNS returns every t"): "needs nginx and Docker",
    ("deploy.md", "curl -s localhost:8080/v1/tether/sessions "): "needs the Compose deployment above",
    ("evals.md", "scripts/install_bfcl.sh                   "): LONG,
    ("evals.md", "tether eval --suite bfcl:simple_python,mul"): LONG,
    ("evals.md", "tether eval --suite scenarios --preset str"): LONG,
    ("evals.md", "tether eval --suite bfcl:multi_turn_base -"): LONG,
    ("evals.md", "tether eval --suite bfcl:live_simple,live_"): LONG,
    ("evals.md", "make eval-clients        # python -m ben"): LONG,
    ("gpu.md", "make setup                        # CPU bu"): BUILD,
    ("gpu.md", "cat .venv/.llama-build-flavour"): BUILD,
    ("gpu.md", "tether serve --gpu-layers all             "): "needs a GPU",
    ("gpu.md", "per layer and token = n_kv_heads * (head_d"): "a formula",
    ("guardrails.md", "class Regenerator(Protocol):"): "a signature",
    ("guardrails.md", "Error: invalid arguments for tool 'read_fi"): "output (tests/unit/guardrails)",
    ("guardrails.md", "guard = Guardrails(tools, max_retries=2, c"): "a signature",
    ("mlx.md", "scripts/install_mlx.sh          # into .ve"): BUILD,
    ("mlx.md", ".venv/bin/python -m tether.engine.mlx.conv"): BUILD,
    ("observability.md", ".venv/bin/tether serve --api-key \"$KEY\" &"): SERVE,
    ("observability.md", "rate(tether_completion_tokens_total[5m])  "): "PromQL for a Prometheus server",
    ("observability.md", ".venv/bin/tether serve &"): SERVE,
    ("workflows.md", "flow.yaml: steps[1].tool: 'foo' is not a d"): "output (tests/unit/workflows)",
    ("workflows.md", "Not executed: submit finishes the task, bu"): "output (tests/unit/workflows)",
    ("workflows.md", "tether serve --workflow fix_bug.yaml      "): SERVE,
    ("workflows.md", "runner = WorkflowRunner(workflow, client, "): "a signature (examples/workflow_notes.py runs one)",
    ("workflows.md", "kv_bytes_per_token = n_layers * n_kv_heads"): "a formula",
    ("workflows.md", "2 * 30 * 3 * 64 * 2 = 23,040 bytes per tok"): "a formula",
}


@dataclass(frozen=True)
class Block:
    page: str
    line: int
    lang: str
    code: str

    @property
    def first(self) -> str:
        return self.code.strip().splitlines()[0] if self.code.strip() else ""

    @property
    def key(self) -> tuple[str, str] | None:
        """Its entry in :data:`NOT_RUN`: the page and a prefix of its first line."""
        return next((k for k in NOT_RUN if k[0] == self.page and self.first.startswith(k[1].rstrip())), None)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}"


def blocks() -> list[Block]:
    out = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for m in _FENCE.finditer(text):
            out.append(Block(page.name, text[: m.start()].count("\n") + 1, m.group(1), m.group(2)))
    return out


ALL = blocks()


def kind(block: Block) -> str:
    if block.key is not None:
        return "not run"
    if block.lang == "python":
        return "python"
    if block.lang == "sh" and block.first.startswith("curl "):
        return "curl"
    if block.lang in ("toml", "yaml", "json"):
        return block.lang
    return "unknown"


def test_every_block_is_run_parsed_or_said_why_not() -> None:
    unknown = [f"{b} {b.first[:40]!r}" for b in ALL if kind(b) == "unknown"]
    assert not unknown, f"blocks that are neither run, parsed nor listed in NOT_RUN: {unknown}"
    listed = {b.key for b in ALL}
    stale = [key for key in NOT_RUN if key not in listed]
    assert not stale, f"NOT_RUN names blocks that are gone: {stale}"


@pytest.fixture(scope="module")
def served() -> Iterator[str]:
    """``tether serve``'s app (bundled model, bundled embedding model), greedy, on a free port."""
    from tether.config import ServerConfig
    from tether.server import build_app

    config = ServerConfig(n_ctx=4096, default_temperature=0.0, default_max_tokens=128, embedding_model="auto")
    app = build_app(config)
    with serving(app) as url:
        yield url
    app.state.tether.scheduler.close()


def _at(code: str, url: str) -> str:
    return code.replace("http://127.0.0.1:8000", url)


@pytest.mark.parametrize("block", [b for b in ALL if kind(b) == "python"], ids=str)
def test_python_blocks_run(block: Block, served: str, tmp_path: Path) -> None:
    # In a process of its own, as a user runs it (in a fresh folder: some blocks write files).
    done = subprocess.run(
        [sys.executable, "-c", _at(block.code, served)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, f"{block}: {done.stderr[-3000:]}"
    if "print(" in block.code:
        assert done.stdout.strip(), f"{block} printed nothing"


@pytest.mark.parametrize("block", [b for b in ALL if kind(b) == "curl"], ids=str)
def test_curl_blocks_run(block: Block, served: str) -> None:
    done = subprocess.run(
        ["bash", "-c", _at(block.code, served).replace("curl -s ", "curl -sS --fail-with-body ")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, f"{block}: {done.stderr}{done.stdout[-2000:]}"
    # What came back: JSON objects, one after another (several commands, or a stream), or SSE lines.
    text = "\n".join(line.removeprefix("data: ") for line in done.stdout.splitlines() if line != "data: [DONE]")
    decoder, at, objects = json.JSONDecoder(), 0, 0
    while (at := text.find("{", at)) >= 0:
        value, at = decoder.raw_decode(text, at)
        assert "error" not in value, f"{block}: {value}"
        objects += 1
    assert objects, f"{block} printed no JSON: {done.stdout[:500]}"


def test_the_workflow_example_prints_what_the_notes_say() -> None:
    """examples/workflow_notes.py as a user runs it, on the bundled model (its own process)."""
    done = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "workflow_notes.py")],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
        cwd=ROOT,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = done.stdout
    assert "-> ok: 'The release moves to Friday" in out, out
    assert "the release is on Friday" in out and "finished: completed (terminal_succeeded)" in out, out
    assert "None tokens" not in out


@pytest.mark.parametrize("block", [b for b in ALL if kind(b) in ("toml", "yaml", "json")], ids=str)
def test_config_blocks_parse(block: Block, tmp_path: Path) -> None:
    if block.lang == "toml":
        tomllib.loads(block.code)
    elif block.lang == "json":
        json.loads(block.code)
    else:
        value = yaml.safe_load(block.code)
        if isinstance(value, dict) and "steps" in value:  # a workflow: its own loader checks it
            from tether.workflows import load_workflow

            path = tmp_path / "flow.yaml"
            path.write_text(block.code, encoding="utf-8")
            load_workflow(path)
