"""An agent loop that takes one item at a time, and one that goes on after a compaction (bundled
model, strict, over a real socket).

"For each report: read it, then record its total" is read, record, read, record: the first reply
reads one report, and each record takes the quarter the last read named and the total that report
labels (a small model copies its own earlier call: q1's total three times). After a compaction
elided the first read, the request is still the user's (not the elision note), so the next step is
the ticket, not a re-read.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

READ = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a text file.",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}
RECORD = {
    "type": "function",
    "function": {
        "name": "record_total",
        "description": "Record a quarter's total revenue.",
        "parameters": {
            "type": "object",
            "properties": {
                "quarter": {"type": "string", "enum": ["q1", "q2", "q3"]},
                "total": {"type": "number"},
            },
            "required": ["quarter", "total"],
        },
    },
}
TICKET = {
    "type": "function",
    "function": {
        "name": "file_ticket",
        "description": "File a bug ticket for an error code in a component.",
        "parameters": {
            "type": "object",
            "properties": {
                "code": {"type": "string", "description": "Error code, e.g. E1234"},
                "component": {"type": "string"},
            },
            "required": ["code", "component"],
        },
    },
}
TOTALS = {"q1": 10500, "q2": 12250, "q3": 9875}


def report(quarter: str) -> str:
    lines = [f"line item {i}: shipped order, see ledger" for i in range(1, 21)]
    return "\n".join([*lines, f"TOTAL {TOTALS[quarter]}"]) + "\n"


@pytest.fixture(scope="module")
def base(served_as_serve: str) -> str:
    return served_as_serve


def reply(base: str, messages: list[dict[str, Any]], tools: list[dict[str, Any]]) -> dict[str, Any]:
    body = {"model": "smollm2-135m-instruct", "messages": messages, "tools": tools, "temperature": 0}
    r = httpx.post(f"{base}/v1/chat/completions", json={**body, "max_tokens": 128}, timeout=300)
    assert r.status_code == 200, r.text
    return dict(r.json()["choices"][0]["message"])


def test_each_report_is_read_then_its_own_total_recorded(base: str) -> None:
    messages: list[dict[str, Any]] = [
        {
            "role": "user",
            "content": "For each of reports/q1.txt, reports/q2.txt and reports/q3.txt: read the file, "
            "then record its TOTAL with record_total before reading the next one.",
        }
    ]
    made: list[tuple[str, dict[str, Any]]] = []
    for _ in range(6):
        message = reply(base, messages, [READ, RECORD])
        calls = message.get("tool_calls") or []
        if not calls:
            break
        messages.append({"role": "assistant", "content": None, "tool_calls": calls})
        for call in calls:
            name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
            made.append((name, args))
            quarter = str(args.get("path", ""))[-6:-4]
            result = report(quarter) if name == "read_file" and quarter in TOTALS else f"Recorded {args}."
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
    assert made == [
        ("read_file", {"path": "reports/q1.txt"}),
        ("record_total", {"quarter": "q1", "total": 10500}),
        ("read_file", {"path": "reports/q2.txt"}),
        ("record_total", {"quarter": "q2", "total": 12250}),
        ("read_file", {"path": "reports/q3.txt"}),
        ("record_total", {"quarter": "q3", "total": 9875}),
    ], made


def test_after_a_compaction_the_request_goes_on_to_its_next_step(base: str) -> None:
    log = [f"2025-02-01T10:{i} INFO request served in 12 ms" for i in range(1, 31)]
    log.insert(17, "2025-02-01T10:17 ERROR code=E4711 component=billing message=ledger mismatch")
    read = {
        "id": "c1",
        "type": "function",
        "function": {"name": "read_file", "arguments": '{"path": "logs/server.log"}'},
    }
    messages = [
        {
            "role": "user",
            "content": "Read README.md for background, then read logs/server.log, find the single ERROR "
            "line and file a ticket with its code and component.",
        },
        {
            "role": "user",
            "content": "[Earlier conversation elided: 2 messages removed to fit the context window; "
            "tools called: read_file]",
        },
        {"role": "assistant", "content": None, "tool_calls": [read]},
        {"role": "tool", "tool_call_id": "c1", "content": "\n".join(log)},
    ]
    message = reply(base, messages, [READ, TICKET])
    calls = [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]
    assert calls[:1] == [("file_ticket", {"code": "E4711", "component": "billing"})], message
