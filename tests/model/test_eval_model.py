"""A tiny end-to-end ``tether eval`` on the bundled model: JSONL per preset and the HTML report."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from typer.testing import CliRunner

from tether.evals.cli import eval_app


def test_tiny_eval_writes_jsonl_and_html(tmp_path: Path) -> None:
    suites = ["--suite", "scenarios:plumbing"]
    if importlib.util.find_spec("bfcl_eval") is not None:
        suites += ["--suite", "bfcl:simple"]
    out = str(tmp_path / "{suite}.{preset}.jsonl")
    args = [*suites, "--limit", "1", "--preset", "bare,full", "--max-tokens", "48", "--ctx", "4096"]
    args += ["--out", out, "--no-progress", "--threads", "1"]
    result = CliRunner().invoke(eval_app, args)
    assert result.exit_code == 0, result.output
    names = ["scenarios-plumbing"] + (["bfcl-simple"] if len(suites) > 2 else [])
    for name in names:
        for preset in ("bare", "full"):
            lines = (tmp_path / f"{name}.{preset}.jsonl").read_text().splitlines()
            assert len(lines) == 1
            record = json.loads(lines[0])
            assert record["preset"] == preset and record["model_calls"] >= 1
            assert record["prompt_tokens"] > 0 and record["server"] == "tether"
            assert isinstance(record["correct"], bool)
            if name == "bfcl-simple":  # a one-reply item says why each intervention happened
                assert len(record["notes"]) == sum(record["interventions"].values())
        page = (tmp_path / f"{name}.report.html").read_text()
        assert "<svg" in page and "Paired deltas against bare" in page
    # Re-running with the same output skips the finished items: no new lines.
    again = CliRunner().invoke(eval_app, args)
    assert again.exit_code == 0, again.output
    assert len((tmp_path / f"{names[0]}.bare.jsonl").read_text().splitlines()) == 1
    # --item runs only the named items of the selection.
    one = ["--suite", "scenarios:plumbing", "--item", "plumbing.note", "--preset", "bare", "--ctx", "4096"]
    one += ["--max-tokens", "48", "--out", str(tmp_path / "one.{preset}.jsonl"), "--no-progress", "--threads", "1"]
    picked = CliRunner().invoke(eval_app, one)
    assert picked.exit_code == 0, picked.output
    ids = {json.loads(line)["item_id"] for line in (tmp_path / "one.bare.jsonl").read_text().splitlines()}
    assert ids == {"plumbing.note"}
