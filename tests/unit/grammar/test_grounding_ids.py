"""Identifier parameters prefer the numbers the conversation labels as ids."""

from __future__ import annotations

import numpy as np

from tether.grammar.formats.base import ToolSpec
from tether.grammar.grounding import GroundingProcessor
from tether.grammar.spans import closest_records, labelled_ids, number_spans
from tether.grammar.vocab import TokenVocab
from tether.schema_kinds import identifier_words

PIECES = [bytes([i]) for i in range(256)] + [b""]
VOCAB = TokenVocab.from_pieces(PIECES, [256])
INVITE = ToolSpec(
    "invite",
    "Invite someone to an event by event id.",
    {
        "type": "object",
        "properties": {"event_id": {"type": "integer"}, "guests": {"type": "integer"}},
    },
)


def test_identifier_parameters_and_their_other_name_words() -> None:
    assert identifier_words("event_id") == frozenset({"event"})
    assert identifier_words("orderId") == frozenset({"order"})
    assert identifier_words("id") == frozenset()
    assert identifier_words("idea") is None and identifier_words("width") is None


def test_labelled_ids_are_the_numbers_after_an_id_label() -> None:
    text = b'On 2025-05-02.\nCreated event with id 2. [{"id": 7, "price": 30}] see order 17, #5, 3 guests'
    found = {n for _, _, n in labelled_ids(text, number_spans(text), frozenset({"order"}))}
    assert found == {b"2", b"7", b"17", b"5"}
    assert {n for _, _, n in labelled_ids(text, number_spans(text), frozenset())} == {b"2", b"7", b"5"}


def _step(g: GroundingProcessor, text: bytes) -> np.ndarray:
    return g(np.asarray(list(text), dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))


def test_an_id_parameter_prefers_the_labelled_id_over_a_dates_year() -> None:
    source = 'Create an event "Design review" on 2025-05-02 and invite 3 people.\nCreated event with id 24.'
    head = b'{"name": "invite", "arguments": {"event_id": '
    out = _step(GroundingProcessor(VOCAB, source, [INVITE], prompt_len=0), head)
    assert out[ord("2")] == 4.0 and out[ord("3")] == 0.0  # 24 only, not 3 or 2025's year
    out = _step(GroundingProcessor(VOCAB, source, [INVITE], prompt_len=0), head + b"2")
    assert out[ord("4")] == 4.0 and out[ord("0")] == 0.0 and out[ord(",")] == 0.0
    # Another integer parameter keeps every number of the conversation.
    out = _step(
        GroundingProcessor(VOCAB, source, [INVITE], prompt_len=0),
        b'{"name": "invite", "arguments": {"guests": ',
    )
    assert out[ord("3")] == 4.0 and out[ord("2")] == 4.0
    # With no labelled id, an id parameter keeps them all too.
    out = _step(GroundingProcessor(VOCAB, "Invite 3 people on 2025-05-02", [INVITE], prompt_len=0), head)
    assert out[ord("2")] == 4.0 and out[ord("3")] == 4.0


READ = ToolSpec("read_file", "Read a file.", {"type": "object", "properties": {"path": {"type": "string"}}})


def test_a_file_this_tool_already_read_is_not_the_next_one_preferred() -> None:
    source = "Read README.md for background, then read logs/server.log"
    head = b'{"name": "read_file", "arguments": {"path": "'
    fresh = _step(GroundingProcessor(VOCAB, source, [READ], prompt_len=0), head)
    assert fresh[ord("R")] == 8.0 and fresh[ord("l")] == 8.0  # both file names begin here
    answered = frozenset({("read_file", "path", "README.md")})
    out = _step(GroundingProcessor(VOCAB, source, [READ], prompt_len=0, answered=answered), head)
    assert out[ord("l")] == 8.0 and out[ord("R")] == -8.0
    other = frozenset({("write_file", "path", "README.md")})  # another tool's use says nothing here
    assert (
        _step(GroundingProcessor(VOCAB, source, [READ], prompt_len=0, answered=other), head)[ord("R")] == 8.0
    )


def test_a_file_only_the_clients_instructions_name_gives_way_to_one_the_user_names() -> None:
    # opencode's system prompt gives src/foo.c as an example; the user asks about VERSION.txt.
    system = "When you cite code, write the path: src/foo.c or lib/zed.py."
    source = system + "\nWhich version is written in VERSION.txt?"
    head = b'{"name": "read_file", "arguments": {"path": "'
    said = "Which version is written in VERSION.txt?"
    out = _step(GroundingProcessor(VOCAB, source, [READ], prompt_len=0, said=said), head)
    assert out[ord("V")] == 8.0 and out[ord("s")] == 0.0 and out[ord("l")] == 0.0
    # Where the user names no file, the instructions' names are all there is.
    plain = _step(
        GroundingProcessor(VOCAB, system + "\nWhich version is this?", [READ], prompt_len=0, said="x"), head
    )
    assert plain[ord("s")] == 8.0 and plain[ord("l")] == 8.0


def test_a_folder_the_user_names_is_a_name_and_the_instructions_paths_give_way() -> None:
    # opencode's example path begins with the folder the user asks about.
    system = "Cite code as src/services/process.ts:712."
    said = "List the files in the src folder."
    head = b'{"name": "read_file", "arguments": {"path": "'
    grounding = GroundingProcessor(VOCAB, system + "\n" + said, [READ], prompt_len=0, said=said)
    assert _step(grounding, head)[ord("s")] == 8.0  # the folder's first token
    grounding = GroundingProcessor(VOCAB, system + "\n" + said, [READ], prompt_len=0, said=said)
    out = _step(grounding, head + b"src")
    assert out[ord('"')] > 0 and out[ord("/")] == 0.0  # the folder ends; the example does not go on
    # Without the folder, the example path goes on as before.
    grounding = GroundingProcessor(VOCAB, system + "\nList them.", [READ], prompt_len=0, said="List them.")
    assert _step(grounding, head + b"src")[ord("/")] > 0


def test_of_several_labelled_ids_the_one_whose_record_the_request_describes() -> None:
    result = (
        b'[{"id": 1, "item": "desk lamp", "status": "delivered"}, '
        b'{"id": 3, "item": "desk lamp", "status": "pending"}, {"id": 4, "item": "chair", "status": "pending"}]'
    )
    spans = labelled_ids(result, number_spans(result), frozenset({"order"}))
    assert [n for _, _, n in spans] == [b"1", b"3", b"4"]
    picked = closest_records(result, spans, "Cancel my pending order for the desk lamp.")
    assert [n for _, _, n in picked] == [b"3"]
    assert closest_records(result, spans, "Cancel it.") == spans  # no word in common: all of them
    source = "Cancel my pending order for the desk lamp.\n" + result.decode()
    head = b'{"name": "cancel", "arguments": {"order_id": '
    cancel = ToolSpec(
        "cancel", "Cancel an order.", {"type": "object", "properties": {"order_id": {"type": "integer"}}}
    )
    out = _step(
        GroundingProcessor(VOCAB, source, [cancel], prompt_len=0, request=source.split("\n")[0]), head
    )
    assert out[ord("3")] == 4.0 and out[ord("1")] == 0.0 and out[ord("4")] == 0.0
