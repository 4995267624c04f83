"""The preference for a copied value starts at the quote that opens it.

A tokenizer merges a string's opening quote with what follows (``"17``, ``"}``, ``""``): a model
that writes ``"}`` at a value has opened the string and written ``}`` in one step, past any
preference that begins inside the string.
"""

from __future__ import annotations

import numpy as np

from tether.grammar.formats.base import ToolSpec
from tether.grammar.grounding import GroundingProcessor
from tether.grammar.vocab import TokenVocab

MERGED = [b'"', b' "', b'"}', b'""', b'"17', b'" 17', b'"7', b'"gre', b'"pre', b'"{', b'"\\n']
PIECES = [bytes([i]) for i in range(256)] + [b"", *MERGED]
VOCAB = TokenVocab.from_pieces(PIECES, [256])


def _tool(name: str, **properties: object) -> ToolSpec:
    return ToolSpec(name, name.replace("_", " "), {"type": "object", "properties": properties})


STRING = {"type": "string"}
CALC = _tool(
    "calculate",
    expression=STRING,
    count={"type": "integer"},
    tags={"type": "array", "items": STRING},
    unit={"type": "string", "enum": ["m", "s"]},
)
WRITE = _tool("write_file", path=STRING, content=STRING)


def tid(piece: bytes) -> int:
    return PIECES.index(piece)


def _step(g: GroundingProcessor, text: bytes) -> np.ndarray:
    return g(np.asarray(list(text), dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))


def test_the_quote_and_a_quote_joined_to_a_span_start_are_preferred_at_a_string_value() -> None:
    g = GroundingProcessor(VOCAB, "Use the calculator to compute 17 * 23.", [CALC], prompt_len=0)
    out = _step(g, b'{"name": "calculate", "arguments": {"expression": ')
    assert out[tid(b'"')] == 4.0 and out[tid(b' "')] == 4.0 and out[tid(b'"17')] == 4.0
    assert out[tid(b'"}')] == 0.0 and out[tid(b'""')] == 0.0 and out[tid(b'"{')] == 0.0
    assert out[tid(b'"7')] == 0.0  # "7" of "17" is not where a word begins
    assert out[tid(b'" 17')] == 0.0  # nor is the space before it


def test_only_where_a_string_goes() -> None:
    g = GroundingProcessor(VOCAB, "Use the calculator to compute 17 * 23.", [CALC], prompt_len=0)
    assert _step(g, b'{"name": "calculate", "arguments": {"count": ')[tid(b'"17')] == 0.0  # an integer
    g = GroundingProcessor(VOCAB, "Use the calculator to compute 17 * 23.", [CALC], prompt_len=0)
    assert _step(g, b'{"name": "calculate", "arguments": {"unit": ')[tid(b'"')] == 0.0  # an enum's own
    g = GroundingProcessor(VOCAB, "Use the calculator to compute 17 * 23.", [CALC], prompt_len=0)
    out = _step(g, b'{"name": "calculate", "arguments": {"tags": ')
    assert out[tid(b'"')] == 0.0  # the array opens first
    g = GroundingProcessor(VOCAB, "Use the calculator to compute 17 * 23.", [CALC], prompt_len=0)
    out = _step(g, b'{"name": "calculate", "arguments": {"tags": [')
    assert out[tid(b'"17')] == 4.0 and out[tid(b'"}')] == 0.0  # an item of it


def test_a_file_name_opens_at_the_quote_with_its_first_bytes_and_is_copied_whole() -> None:
    source = 'Write "hello world" to greeting.txt.'
    g = GroundingProcessor(VOCAB, source, [WRITE], prompt_len=0)
    out = _step(g, b'{"name": "write_file", "arguments": {"path": ')
    assert out[tid(b'"gre')] == 8.0 and out[tid(b'"')] == 8.0
    assert out[tid(b'"pre')] == 0.0 and out[tid(b'"}')] == 0.0
    g = GroundingProcessor(VOCAB, source, [WRITE], prompt_len=0)
    out = _step(g, b'{"name": "write_file", "arguments": {"path": "greet')
    assert out[ord("i")] == 12.0 and out[ord(".")] == 0.0 and out[ord('"')] == 0.0


EVENT = _tool(
    "create_event",
    title=STRING,
    date={"type": "string", "description": "YYYY-MM-DD"},
    time={"type": "string", "description": "HH:MM, 24-hour clock"},
)


def test_a_date_or_time_parameter_begins_where_the_text_writes_one_and_a_title_does_not() -> None:
    source = "Put a dentist appointment in my calendar on 2025-03-14 at 09:30."
    head = b'{"name": "create_event", "arguments": {'
    out = _step(GroundingProcessor(VOCAB, source, [EVENT], prompt_len=0), head + b'"date": "')
    assert out[ord("2")] == 8.0 and out[ord("0")] == 0.0 and out[ord("P")] == 0.0
    out = _step(GroundingProcessor(VOCAB, source, [EVENT], prompt_len=0), head + b'"time": "')
    assert out[ord("0")] == 8.0 and out[ord("2")] == 0.0
    out = _step(GroundingProcessor(VOCAB, source, [EVENT], prompt_len=0), head + b'"title": "')
    assert out[ord("d")] == 4.0 and out[ord("P")] == 4.0
    assert out[ord("2")] == 0.0  # the date's start, not a title's
    out = _step(GroundingProcessor(VOCAB, source, [EVENT], prompt_len=0), head + b'"date": "2025')
    assert out[ord("-")] == 4.0  # then copied as any value
    # A title that ran through the whole sentence leaves its date and time free for their parameters.
    whole = head + b'"title": "' + source[:-1].encode() + b'", "date": "2025-03-14", "time": "'
    out = _step(GroundingProcessor(VOCAB, source, [EVENT], prompt_len=0), whole)
    assert out[ord("0")] == 8.0
    plain = "Put a dentist appointment in my calendar."  # no date written: any span, as before
    out = _step(GroundingProcessor(VOCAB, plain, [EVENT], prompt_len=0), head + b'"date": "')
    assert out[ord("P")] == 4.0


TICKET = _tool("file_ticket", code={"type": "string", "description": "Error code, e.g. E1234"})


def test_a_schema_example_is_not_the_value_where_the_conversation_writes_another() -> None:
    source = "2025-02-01T10:31 ERROR E4711 in billing"
    out = _step(
        GroundingProcessor(VOCAB, source, [TICKET], prompt_len=0),
        b'{"name": "file_ticket", "arguments": {"code": "',
    )
    assert out[ord("E")] == 4.0  # begins the log's E4711 too
    assert out[ord("1")] == 0.0  # not a start of anything here, nor of the example
    ids = [*b'{"name": "file_ticket", "arguments": {"code": "E']
    g = GroundingProcessor(VOCAB, source, [TICKET], prompt_len=0)
    out = g(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    assert out[ord("4")] == 8.0 and out[ord("1")] == 0.0  # then the log's code, a word begun
    shown = _step(
        GroundingProcessor(VOCAB, "File one for billing", [TICKET], prompt_len=0),
        b'{"name": "file_ticket", "arguments": {"code": "',
    )
    assert shown[ord("E")] == -4.0  # the example begins nothing the conversation says
