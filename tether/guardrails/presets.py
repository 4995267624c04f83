"""Which guardrails run: ``GuardConfig``, the one options object, and the named presets as data.

``constrain`` is layer 0 (in the sampler); the other switches are the layers of the guard
pipeline that run after sampling (:mod:`tether.guardrails.pipeline`). Each preset adds one
layer to the previous one; the server, the ``Guardrails`` middleware and the eval CLI all
read them from here.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from tether.config import ConstrainMode

__all__ = ["PRESETS", "PRESET_NAMES", "GuardConfig", "PresetName", "preset"]

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
    coerce: bool = True  # lossless, recorded coercions while validating (tether.coercion)
    fill_defaults: bool = False  # fill missing properties from schema defaults (recorded)


_OFF = GuardConfig(
    "off", rescue=False, resolve=False, repick=False, validate=False, repair=False, dedupe=False
)

PRESETS: dict[str, GuardConfig] = {
    "bare": _OFF,
    "names": replace(_OFF, constrain="names"),
    "resolve": replace(_OFF, constrain="names", resolve=True, repick=True),
    "rescue": replace(_OFF, constrain="names", resolve=True, repick=True, rescue=True),
    "full": GuardConfig("names"),
    "strict": GuardConfig("strict"),
}


def preset(name: str) -> GuardConfig:
    """The named preset; unknown names raise ``KeyError`` (request validators check them first)."""
    return PRESETS[name]
