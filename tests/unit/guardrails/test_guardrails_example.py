"""``examples/guardrails_openai.py`` runs end to end against tether's app over a scripted engine."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from guardrails_support import scripted_app, sync_http
from openai import OpenAI

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "guardrails_openai.py"


def test_example_agent_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "notes.txt").write_text("first line\nsecond line\n")
    replies = [
        json.dumps({"tool_calls": [{"name": "LS", "arguments": {}}]}),
        json.dumps({"tool_calls": [{"name": "ReadFile", "arguments": {"path": "notes.txt", "lines": "1"}}]}),
        json.dumps({"response": "notes.txt starts with: first line"}),
    ]
    app, engine = scripted_app(replies, constrain="off", preset="bare")
    spec = importlib.util.spec_from_file_location("guardrails_openai_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with sync_http(app) as http:

        def client(**kwargs: Any) -> OpenAI:
            return OpenAI(**kwargs, http_client=http, max_retries=0)

        monkeypatch.setattr(module, "OpenAI", client)
        monkeypatch.chdir(tmp_path)
        monkeypatch.setattr(
            sys, "argv", ["guardrails_openai.py", "--base-url", "http://test/v1", "what is here?"]
        )
        module.main()
    out = capsys.readouterr().out
    assert "[guardrail] name_resolved: alias match: 'LS' -> 'list_dir'" in out
    assert '[guardrail] args_coerced: lines: "1" → 1 (string to integer)' in out
    assert "notes.txt starts with: first line" in out
    # The tally covers what it printed (here the client-side guardrails did it all).
    assert (
        "interventions: {'name_resolved': 2, 'args_coerced': 1} (client-side: {'name_resolved': 2, 'args_coerced': 1})"
        in out
    )
    assert len(engine.prompts) == 3
    assert "first line" in engine.prompts[2] and "second line" not in engine.prompts[2]
