"""A request's parts: each can ask for a tool, in the order the request says them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tether.calls import ToolCall
from tether.chat import Message, elision_marker
from tether.grammar.file_names import folder_mentions
from tether.grammar.formats.base import ToolSpec
from tether.selection.clauses import clauses, command_mentions, command_runner, declines_action, request_steps
from tether.selection.decision import DecisionModel, relevance, request_text, steering_for
from tether.selection.next_step import answered_values, next_step
from tether.selection.relevance import stem
from tether.selection.semantic import SemanticRelevance

READ = ToolSpec(
    "read_file", "Read a text file.", {"type": "object", "properties": {"path": {"type": "string"}}}
)
TICKET = ToolSpec(
    "file_ticket",
    "File a support ticket with an error code and the component it came from.",
    {"type": "object", "properties": {"code": {"type": "string"}, "component": {"type": "string"}}},
)
NOTE = ToolSpec(
    "add_note",
    "Save a short note for the user.",
    {"type": "object", "properties": {"text": {"type": "string"}}},
)
MODEL = DecisionModel()
ASK = "Read README.md for background, then read logs/server.log and file a ticket with its error code."


def test_a_request_splits_at_clause_punctuation_then_and_and() -> None:
    assert clauses(ASK) == [
        "Read README.md for background,",
        "read logs/server.log",
        "file a ticket with its error code.",
    ]
    assert clauses("Weather in Paris and London?") == []  # "London?" alone is no part: one part, no split
    assert clauses("Read a.txt and then b.txt, and tell me the version.")[-1] == "tell me the version."


def test_the_steps_follow_the_request_and_a_second_read_of_another_file_is_another_step() -> None:
    assert request_steps(ASK, [READ, TICKET], MODEL, None) == ["read_file", "read_file", "file_ticket"]
    # A part that says no value of its own asks again for nothing: one step.
    water = ToolSpec(
        "log_water", "Log glasses of water drunk.", {"type": "object", "properties": {"glasses": {}}}
    )
    assert request_steps("I drank 3 glasses of water, please log the water.", [water], MODEL, None) == [
        "log_water"
    ]


def _after(*exchanges: tuple[ToolCall, str]) -> list[Message]:
    out = [Message("user", ASK)]
    for call, result in exchanges:
        out += [Message("assistant", "", tool_calls=(call,)), Message("tool", result, tool_call_id=call.id)]
    return out


def test_each_answered_call_serves_one_part_and_the_first_part_left_is_next() -> None:
    tools = [READ, TICKET]
    steps = request_steps(ASK, tools, MODEL, None)
    first = (ToolCall("read_file", {"path": "README.md"}, "c1"), "Background: billing.")
    messages = _after(first)
    found = next_step(messages, tools, relevance(messages, tools), MODEL, steps)
    assert found.prior == MODEL.in_loop_step_prior and found.pending == ("read_file", "file_ticket")
    steered = steering_for(messages, tools, MODEL, decide=True, names=True)
    assert steered.name_prior["read_file"] > steered.name_prior["file_ticket"]
    assert answered_values(messages) == frozenset({("read_file", "path", "README.md")})
    # A fresh ask of several steps starts at its first, however well a later one fits the whole: the
    # file is read before the ticket is filed.
    fresh = steering_for([Message("user", ASK)], tools, MODEL, decide=True, names=True)
    assert fresh.name_prior["read_file"] == fresh.name_prior["file_ticket"] + MODEL.pending_name_bias
    plain = steering_for(
        [Message("user", "file a ticket with its error code")], tools, MODEL, decide=True, names=True
    )
    assert plain.name_prior["read_file"] < plain.name_prior["file_ticket"]  # one step: as the words say


def test_calls_made_for_a_request_whose_words_name_no_tool_answer_it_when_they_answered() -> None:
    move = ToolSpec(
        "transfer", "Transfer money between accounts.", {"type": "object", "properties": {"amount": {}}}
    )
    messages = [
        Message("user", "Move 250.75 euros from my checking account to savings."),
        Message("assistant", "", tool_calls=(ToolCall("transfer", {"amount": 250.75}, "c1"),)),
        Message("tool", "Created transfers entry 1.", tool_call_id="c1"),
    ]
    ranked = relevance(messages, [move])
    assert MODEL.prior(ranked) < 0  # the words alone would not call
    assert next_step(messages, [move], ranked, MODEL).prior == -MODEL.in_loop_done_prior
    failed = [*messages[:2], Message("tool", "Error: the bank is closed.", tool_call_id="c1")]
    assert next_step(failed, [move], relevance(failed, [move]), MODEL).prior == 0.0


class ByTopic:
    """Texts about notes point one way, everything else another (a stand-in for meaning)."""

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        rows = [[1.0, 0.0] if "note" in t.lower() and "milk" not in t.lower() else [0.0, 1.0] for t in texts]
        return np.asarray(rows, dtype=np.float32)


def test_a_part_can_say_in_meaning_what_the_whole_request_does_not() -> None:
    semantic = SemanticRelevance(ByTopic())
    whole = [Message("user", "Save a note for me: buy oat milk.")]
    assert semantic.scores("Save a note for me: buy oat milk.", [NOTE]) == [0.0]
    assert relevance(whole, [NOTE], semantic)[0].semantic == 1.0  # "Save a note for me:" alone


def test_nouns_made_of_verbs_share_the_verbs_stem() -> None:
    assert stem("calculator") == stem("calculate") == stem("calculation")
    assert stem("deletion") == stem("delete") and stem("prediction") == stem("predict")
    assert stem("station") != stem("stats")  # too short a stem to cut


def test_a_request_that_forbids_the_action_it_asks_about_is_answered() -> None:
    assert declines_action("What does deleting my account do? Just explain, don't do it.")
    assert declines_action("How would you restart the server? Do not actually run that.")
    assert not declines_action("Delete my account.")
    assert not declines_action("Don't forget to send it to Bob.")
    assert not declines_action("Do it now: restart the server.")
    tools = [ToolSpec("delete_account", "Delete the user's account.", {"type": "object", "properties": {}})]
    asked = [Message("user", "What does deleting my account do? Just explain, don't do it.")]
    assert steering_for(asked, tools, DecisionModel(), decide=True, names=True).call_prior < -10


RECORD = ToolSpec(
    "record_total",
    "Record a quarter's total revenue.",
    {
        "type": "object",
        "properties": {
            "quarter": {"type": "string", "enum": ["q1", "q2", "q3"]},
            "total": {"type": "number"},
        },
    },
)
EACH = (
    "For each of reports/q1.txt, reports/q2.txt and reports/q3.txt: read the file, then record its TOTAL "
    "with record_total before reading the next one."
)


def test_a_request_that_takes_each_item_through_its_steps_interleaves_them() -> None:
    tools = [READ, RECORD]
    steps = request_steps(EACH, tools, MODEL, None)
    assert steps == ["read_file", "record_total"] * 3
    # Without "each" and an order word, the reads come first, as the request lists them.
    listed = "Read reports/q1.txt, read reports/q2.txt, then record the totals with record_total."
    assert request_steps(listed, tools, MODEL, None) == ["read_file", "read_file", "record_total"]
    # One step at a time: the first reply reads one report, and after it the record is next, alone.
    fresh = steering_for([Message("user", EACH)], tools, MODEL, decide=True, names=True, cap=True)
    assert fresh.max_calls == 1
    read = ToolCall("read_file", {"path": "reports/q1.txt"}, "c1")
    messages = [
        Message("user", EACH),
        Message("assistant", "", tool_calls=(read,)),
        Message("tool", "TOTAL 10500", tool_call_id="c1"),
    ]
    step = next_step(messages, tools, relevance(messages, tools), MODEL, steps)
    assert step.todo == ("record_total", "read_file", "record_total", "read_file", "record_total")
    steered = steering_for(messages, tools, MODEL, decide=True, names=True, cap=True)
    assert steered.max_calls == 1
    assert steered.name_prior["record_total"] >= steered.name_prior["read_file"] + MODEL.pending_name_bias


def test_after_a_compaction_the_request_is_the_users_and_the_elided_calls_served_their_parts() -> None:
    tools = [READ, TICKET]
    read = ToolCall("read_file", {"path": "logs/server.log"}, "c2")
    messages = [
        Message("user", ASK),
        elision_marker(
            [Message("assistant", "", tool_calls=(ToolCall("read_file", {"path": "README.md"}, "c1"),))]
        ),
        Message("assistant", "", tool_calls=(read,)),
        Message("tool", "10:17 ERROR code=E4711 component=billing", tool_call_id="c2"),
    ]
    assert request_text(messages) == ASK
    steps = request_steps(ASK, tools, MODEL, None)
    step = next_step(messages, tools, relevance(messages, tools), MODEL, steps)
    assert step.prior == MODEL.in_loop_step_prior and step.pending == ("file_ticket",)
    assert answered_values(messages) == frozenset({("read_file", "path", "logs/server.log")})


def test_a_request_that_names_a_file_with_a_file_tool_offered_is_the_models_to_decide() -> None:
    # opencode's read tool: a long description the short request matches poorly, in words or meaning.
    read = ToolSpec(
        "read",
        "Read a file or directory from the local filesystem. If the path does not exist, an error is "
        "returned.\n\nUsage:\n- The filePath parameter should be an absolute path.",
        {"type": "object", "properties": {"filePath": {"type": "string"}}},
    )
    asked = [Message("user", "Which version number is written in VERSION.txt?")]
    steering = steering_for(asked, [read, NOTE], MODEL, decide=True, names=True)
    assert steering.call_prior == 0.0  # not below: the model's own log-odds decide
    unnamed = steering_for(
        [Message("user", "Which version is this?")], [read, NOTE], MODEL, decide=True, names=True
    )
    assert unnamed.call_prior < 0.0
    no_file_tool = steering_for(asked, [NOTE], MODEL, decide=True, names=True)
    assert no_file_tool.call_prior < 0.0
    for text in (
        "e.g. the first one",
        "pi is 3.14",
        "upgrade to v1.2",
        "mail bob@example.com",
        "see x.org/a.html",
    ):
        assert (
            steering_for([Message("user", text)], [read], MODEL, decide=True, names=True).call_prior < 0.0
        ), text


def test_a_request_that_names_a_folder_or_gives_a_command_is_the_models_to_decide() -> None:
    read = READ
    shell = {"command": {"type": "string"}, "description": {"type": "string"}}
    bash = ToolSpec("bash", "Executes a bash command.", {"type": "object", "properties": shell})
    listed = [Message("user", "List the files in the src folder.")]
    assert steering_for(listed, [read, NOTE], MODEL, decide=True, names=True).call_prior == 0.0
    run = [Message("user", 'Run the command python3 -c "print(6*7*1001)" and tell me what it printed.')]
    steering = steering_for(run, [read, bash], MODEL, decide=True, names=True)
    assert steering.call_prior == 0.0
    assert steering.name_prior["bash"] >= steering.name_prior["read_file"] + MODEL.pending_name_bias
    assert steering_for(run, [read, NOTE], MODEL, decide=True, names=True).call_prior < 0.0  # no runner
    assert command_runner(run[0].content, [read, bash]) == "bash"
    assert command_runner(run[0].content, [read]) is None


def test_folder_and_command_mentions() -> None:
    assert folder_mentions("List the files in the src folder.") == ["src"]
    assert folder_mentions("look in src/ and the docs directory") == ["src/", "docs"]
    for text in (
        "the folder is empty",
        "Which folder should I use?",
        "a folder of mine",
        "and/or",
        "see https://x.com/a/",
    ):
        assert folder_mentions(text) == [], text
    assert command_mentions('Run the command python3 -c "print(6*7*1001)" and tell me') == [
        'python3 -c "print(6*7*1001)"'
    ]
    assert command_mentions("run `npm test` please") == ["npm test"]
    assert command_mentions("Explain the command line") == command_mentions("the command prompt") == []


def test_a_request_sent_as_one_json_string_is_read_as_its_text() -> None:
    # opencode run sends the user's words JSON-quoted.
    quoted = Message("user", '"Run the command python3 -c \\"print(1)\\" now"')
    assert request_text([quoted]) == 'Run the command python3 -c "print(1)" now'
    assert request_text([Message("user", '"Hi" she said, "ok"')]) == '"Hi" she said, "ok"'
