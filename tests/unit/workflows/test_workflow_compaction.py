"""Context compaction tiers, pairing invariants (property-tested) and the KV-cache budget."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from structlog.testing import capture_logs
from workflow_support import call, scripted_core

from tether.calls import ToolCall
from tether.chat import Message, elided_calls, is_request
from tether.engine.base import EngineInfo
from tether.turns.events import ChatJob
from tether.workflows import (
    NUDGE_PREFIXES,
    CompactionPolicy,
    compact,
    compact_job,
    context_budget,
    core_token_counter,
    kv_bytes_per_token,
    mem_available_bytes,
)
from tether.workflows.budget import FixedMemory


def count(messages: Sequence[Message]) -> int:
    """A stand-in tokenizer: one token per 4 characters plus per-message overhead."""
    return sum(
        4 + (len(m.content) + sum(len(c.name) + len(c.arguments) for c in m.tool_calls)) // 4
        for m in messages
    )


def turn(i: int, result: str, name: str = "read_file") -> list[Message]:
    cid = f"call_{i}"
    return [
        Message("assistant", "", (ToolCall(name, {"path": f"f{i}"}, cid),)),
        Message("tool", result, tool_call_id=cid, name=name),
    ]


SYSTEM = Message("system", "You are an agent.")
USER = Message("user", "Do the task.")


def history(n: int, size: int = 400) -> list[Message]:
    out = [SYSTEM, USER]
    for i in range(n):
        out += turn(i, chr(97 + i % 26) * size)
    return out


def assert_invariants(before: Sequence[Message], after: Sequence[Message]) -> None:
    assert after[0] == before[0]
    first_user = next(m for m in before if m.role == "user")
    assert first_user in after
    ids = {m.tool_call_id for m in after if m.role == "tool"}
    calls = {c.id for m in after for c in m.tool_calls}
    assert calls <= ids, "an assistant tool call lost its result"
    assert ids <= calls, "a tool result lost its assistant tool call"
    for i, m in enumerate(after):  # results directly follow their call
        if m.role == "tool":
            owner = next(
                j for j in range(i, -1, -1) if any(c.id == m.tool_call_id for c in after[j].tool_calls)
            )
            assert all(after[k].role == "tool" for k in range(owner + 1, i + 1))


def test_fits_already_means_unchanged() -> None:
    msgs = history(3)
    result = compact(msgs, 10_000, count)
    assert result.messages == tuple(msgs) and not result.changed and result.fits


def test_tier1_truncates_old_tool_results_and_keeps_their_ids() -> None:
    msgs = history(6)
    result = compact(
        msgs, count(msgs) - 150, count, policy=CompactionPolicy(keep_last=2, tool_result_chars=20)
    )
    assert result.tiers == ("truncate",) and result.fits and result.truncated >= 1
    cut = [m for m in result.messages if m.role == "tool" and "[truncated" in m.content]
    assert cut[0].content == "a" * 20 + "\n[truncated 380 chars]"
    assert cut[0].tool_call_id == "call_0" and cut[0].name == "read_file"
    assert result.messages[-1].content == msgs[-1].content  # the tail is untouched
    assert_invariants(msgs, result.messages)


def test_tier2_drops_old_nudges_and_reasoning() -> None:
    nudge = Message("user", NUDGE_PREFIXES[0] + " Call one of these tools: read_file.")
    thinking = Message("assistant", "<think>" + "hmm " * 100 + "</think>Let me look.")
    msgs = [SYSTEM, USER, thinking, nudge, *turn(1, "short"), *turn(2, "short"), *turn(3, "short")]
    result = compact(msgs, count(msgs) - 60, count, policy=CompactionPolicy(keep_last=2))
    assert result.tiers == ("drop",) and result.dropped == 2
    assert nudge not in result.messages
    assert Message("assistant", "Let me look.") in result.messages
    assert_invariants(msgs, result.messages)


def test_tier3_elides_whole_turns_into_one_marker() -> None:
    msgs = history(8, size=200)
    with capture_logs() as logs:
        result = compact(
            msgs, 260, count, policy=CompactionPolicy(keep_last=2, tool_result_chars=40), note="Progress: x"
        )
    assert result.fits and result.tiers == ("truncate", "elide") and result.elided % 2 == 0
    markers = [m for m in result.messages if m.content.startswith("[Earlier conversation elided")]
    assert len(markers) == 1 and markers[0].role == "user"
    assert "tools called: read_file x" in markers[0].content and markers[0].content.endswith("Progress: x")
    assert result.messages[:2] == (SYSTEM, USER) and result.messages[2] == markers[0]
    assert_invariants(msgs, result.messages)
    # The marker is a note, not a request, and it says which calls it stands for.
    removed = [m for m in msgs if m not in result.messages]
    assert not is_request(markers[0]) and is_request(USER)
    assert elided_calls(markers[0]) == Counter(c.name for m in removed for c in m.tool_calls)
    entry = next(e for e in logs if e["event"] == "context_compacted")
    assert entry["tiers"] == ["truncate", "elide"] and entry["tokens"] <= 260


def test_tier4_truncates_the_tail_but_not_the_newest_result() -> None:
    msgs = [SYSTEM, USER, *turn(1, "x" * 2000), *turn(2, "y" * 2000)]
    result = compact(msgs, 700, count, policy=CompactionPolicy(keep_last=4, tool_result_chars=100))
    assert result.fits and result.messages[3].content.endswith("[truncated 1900 chars]")
    assert result.messages[-1].content == "y" * 2000


def test_nothing_fits_returns_the_smallest_form() -> None:
    msgs = [SYSTEM, Message("user", "u" * 4000), *turn(1, "r")]
    result = compact(msgs, 10, count)
    assert not result.fits and result.tokens <= count(msgs) and result.messages[1] == msgs[1]


def test_deterministic() -> None:
    msgs = history(10, size=300)
    runs = {compact(msgs, 500, count, policy=CompactionPolicy(keep_last=3)).messages for _ in range(3)}
    assert len(runs) == 1


# -- property: random histories ------------------------------------------------------------


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    out: list[Message] = []
    if draw(st.booleans()):
        out.append(Message("system", draw(st.text(max_size=80))))
    out.append(Message("user", draw(st.text(min_size=1, max_size=120))))
    n = 0
    for kind in draw(st.lists(st.sampled_from(["tools", "text", "user", "nudge", "think"]), max_size=14)):
        if kind == "tools":
            k = draw(st.integers(1, 3))
            ids = [f"c{n + j}" for j in range(k)]
            n += k
            out.append(Message("assistant", "", tuple(ToolCall("t", {}, i) for i in ids)))
            out += [Message("tool", draw(st.text(max_size=600)), tool_call_id=i, name="t") for i in ids]
        elif kind == "text":
            out.append(Message("assistant", draw(st.text(max_size=200))))
        elif kind == "user":
            out.append(Message("user", draw(st.text(max_size=200))))
        elif kind == "nudge":
            out.append(Message("user", NUDGE_PREFIXES[1]))
        else:
            out.append(Message("assistant", "<think>" + draw(st.text(max_size=200)) + "</think>ok"))
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(msgs=histories(), budget=st.integers(0, 600), keep=st.integers(0, 5), chars=st.integers(0, 100))
def test_compaction_keeps_pairs_and_protected_messages_and_fits(
    msgs: list[Message], budget: int, keep: int, chars: int
) -> None:
    policy = CompactionPolicy(keep_last=keep, tool_result_chars=chars)
    result = compact(msgs, budget, count, policy=policy)
    assert_invariants(msgs, result.messages)
    assert result.tokens == count(result.messages) and result.tokens <= count(msgs)
    floor = compact(msgs, -1, count, policy=policy)
    if floor.tokens <= budget:
        assert result.fits
    if not result.changed:
        assert result.messages == tuple(msgs)


# -- the proxy hook and the engine tokenizer -----------------------------------------------


def test_compact_job_uses_the_engine_tokenizer() -> None:
    core, _ = scripted_core([call("x")], n_ctx=2000)
    msgs = tuple(history(12, size=600))
    job = ChatJob(messages=msgs, max_tokens_requested=200)
    fitted, result = compact_job(core, job, policy=CompactionPolicy(keep_last=2, tool_result_chars=100))
    counter = core_token_counter(core)
    assert result.changed and result.budget == 1800
    assert counter(fitted.messages) == result.tokens <= 1800 and counter(msgs) == result.tokens_before
    core.prepare(fitted)  # fits: no ContextOverflowError
    small = ChatJob(messages=(SYSTEM, USER))
    assert compact_job(core, small)[0] is small


# -- the KV-cache budget -------------------------------------------------------------------

SMOLLM2 = {
    "general.architecture": "llama",
    "llama.block_count": "30",
    "llama.attention.head_count": "9",
    "llama.attention.head_count_kv": "3",
    "llama.embedding_length": "576",
}


def info(metadata: dict[str, str], n_ctx: int = 4096) -> EngineInfo:
    return EngineInfo("m", n_ctx, None, "", "", frozenset(), 10, metadata=metadata)


def test_kv_bytes_per_token_matches_the_hand_calculation() -> None:
    # 2 (K and V) * 30 layers * 3 KV heads * 64 head dim (576 / 9) * 2 bytes (f16) = 23,040
    assert kv_bytes_per_token(SMOLLM2) == 2 * 30 * 3 * 64 * 2 == 23_040
    assert kv_bytes_per_token(SMOLLM2, "q8_0") == 12_240  # 34 bytes per 32 elements
    gqa = {**SMOLLM2, "llama.attention.key_length": "128", "llama.attention.value_length": "64"}
    assert kv_bytes_per_token(gqa) == 30 * 3 * (128 + 64) * 2
    assert kv_bytes_per_token({"general.architecture": "llama"}) is None


def test_context_budget_against_memory() -> None:
    roomy = context_budget(info(SMOLLM2), memory=FixedMemory(host=8 * 2**30), reserve_tokens=512)
    assert roomy.kv_bytes_per_slot == 23_040 * 4096 and roomy.budget_tokens == 4096
    assert roomy.prompt_budget == 4096 - 512 and roomy.memory_source == "ram"
    tight = context_budget(info(SMOLLM2), memory=FixedMemory(host=23_040 * 1000), allocated=False, slots=2)
    assert tight.max_ctx_by_memory == 500 and tight.budget_tokens == 500 and tight.reserve_tokens == 250
    unknown = context_budget(info({}), memory=FixedMemory(host=10))
    assert unknown.kv_bytes_per_token is None and unknown.budget_tokens == 4096
    assert set(roomy.as_dict()) >= {"kv_bytes_per_token", "budget_tokens", "mem_available_bytes"}


def test_mem_available_reads_proc_meminfo(tmp_path: Path) -> None:
    fake = tmp_path / "meminfo"
    fake.write_text("MemTotal:       24684000 kB\nMemAvailable:    1000 kB\n")
    assert mem_available_bytes(fake) == 1000 * 1024
    assert mem_available_bytes(tmp_path / "absent") is None
    real = mem_available_bytes()
    assert real is None or real > 0
