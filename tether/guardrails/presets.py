"""Which guardrails run: ``GuardConfig``, the one options object, and the named presets as data.

``constrain`` is layer 0 (in the sampler); the other switches are the layers of the guard
pipeline that run after sampling (:mod:`tether.guardrails.pipeline`). Each preset adds one
layer to the previous one; the server, the ``Guardrails`` middleware and the eval CLI all
read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

__all__ = ["PRESETS", "PRESET_NAMES", "ConstrainMode", "GuardConfig", "PresetName", "preset"]

ConstrainMode = Literal["off", "names", "strict"]  # layer 0: none, offered names only, schema-valid

PresetName = Literal["bare", "names", "resolve", "rescue", "full", "strict"]
PRESET_NAMES: tuple[PresetName, ...] = ("bare", "names", "resolve", "rescue", "full", "strict")


@dataclass(frozen=True)
class GuardConfig:
    """Which guardrails run. ``constrain`` is layer 0 (in the sampler); the rest run after sampling."""

    constrain: ConstrainMode = "names"
    rescue: bool = True
    resolve: bool = True
    repick: bool = True
    validate: bool = True
    repair: bool = True
    dedupe: bool = True  # drop a call identical (name and arguments) to an earlier one in the same reply
    # ... and one identical to a call of the previous turn whose result came back without failing,
    # or to one that failed in each of the last ``failed_retries + 1`` turns.
    end_loops: bool = False
    failed_retries: int = 2
    coerce: bool = True  # lossless, recorded coercions while validating (tether.coercion)
    fill_defaults: bool = False  # fill missing properties from schema defaults (recorded)
    decide: bool = False  # layer 0: the call-or-answer decision with the tools' relevance as a prior
    steer_names: bool = False  # layer 0: the tools' relevance as a prior on the name slot
    ground: bool = False  # layer 0: a strong preference for argument values the conversation contains
    # Layer 0: a fresh ask gets at most one call per item it enumerates (tether.selection.enumeration).
    cap_calls: bool = False
    # With tool_choice auto, a call whose extractive values the conversation mostly lacks is not
    # made (the reply becomes a text answer): the least share of them it must contain (0: off).
    abstain_below: float = 0.0
    # ... and one with a required extractive value the conversation does not say.
    abstain_unsaid: bool = False
    # ... unless the called tool fits the request at least this well (its relevance score, 0: off)
    # and its unsaid values are strings: then it is asked again with them limited to the request's words.
    reground_min: float = 0.0
    # On a fresh ask, optional string and number values nobody said that differ from the tool's
    # default are left out: a guess does not override what the tool does by itself.
    drop_unsaid: bool = False
    # A later call of a reply that only reorders an earlier one's values, or differs from it only in
    # optional values nobody said, is merged into it (the disputed values left to the tool's default).
    merge_variants: bool = False
    # The lone call of a reply to a fresh ask gets the enum values the request names (for unnamed choices too).
    fill_mentioned: bool = False
    # String values are put in the shape their parameter asks for (a date as YYYY-MM-DD, a US state as
    # its code: tether.guardrails.shapes).
    shape_values: bool = False
    # When every call is dropped and the reply said nothing, the model is asked for a text answer.
    redecide: bool = True
    # A text answer to a fresh ask whose meaning is this close (embedding similarity, both the request
    # and the answer to one offered tool) states what the tool exists to supply: it is decided again
    # as a call (0: off; needs an embedding model, tether.turns.answer_check).
    recheck_answers: float = 0.0


_OFF = GuardConfig("off", rescue=False, resolve=False, repick=False, validate=False, repair=False)
_OFF = replace(_OFF, dedupe=False, redecide=False)

PRESETS: dict[str, GuardConfig] = {
    "bare": _OFF,
    "names": replace(_OFF, constrain="names"),
    "resolve": replace(_OFF, constrain="names", resolve=True, repick=True),
    "rescue": replace(_OFF, constrain="names", resolve=True, repick=True, rescue=True),
    "full": GuardConfig("names"),
    # The server's default: the call-or-answer decision and the name prior from the request's words,
    # schema-valid grounded values, and no call whose values nobody said. Agent loops keep working:
    # after a tool result the prior is off and nothing is abstained from, and composed values (a
    # command, a file's content) are neither grounded nor counted against a call.
    "strict": GuardConfig(
        "strict",
        decide=True,
        steer_names=True,
        ground=True,
        cap_calls=True,
        abstain_below=0.5,
        abstain_unsaid=True,
        reground_min=0.3,
        drop_unsaid=True,
        merge_variants=True,
        fill_mentioned=True,
        end_loops=True,
        shape_values=True,
        # between the development split's closest pair of recalls on either side: an irrelevant
        # question's answer recalled at 0.25, a relevant one's at 0.32 (docs/evals.md)
        recheck_answers=0.28,
    ),
}


def preset(name: str) -> GuardConfig:
    """The named preset; unknown names raise ``KeyError`` (request validators check them first)."""
    return PRESETS[name]
