"""Composing logits processors (``tether.engine.processors.chain``): order, flattening, and the
trivial cases an engine relies on to skip the per-step call entirely."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tether.engine.base import LogitsProcessor
from tether.engine.processors import Chain, chain


def recorder(name: str, log: list[str]) -> LogitsProcessor:
    def apply(_: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        log.append(name)
        return logits

    return apply


def double(_: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
    return logits * 2


def add_one(_: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
    return logits + 1


def mask_first(_: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
    out = np.full_like(logits, -np.inf)
    out[1:] = logits[1:]
    return out  # a new row, as layer 0's small-set masks return: the next part must get it


def run(processor: LogitsProcessor | None, *values: float) -> list[float]:
    assert processor is not None
    out = processor(np.zeros(2, dtype=np.intc), np.asarray(values, dtype=np.single))
    return [float(v) for v in out]


def test_chain_applies_its_parts_in_order() -> None:
    assert run(chain([double, add_one]), 1.0, 2.0) == [3.0, 5.0]
    assert run(chain([add_one, double]), 1.0, 2.0) == [4.0, 6.0]
    assert run(chain([mask_first, add_one]), 1.0, 2.0) == [-np.inf, 3.0]


def test_chain_flattens_nested_chains() -> None:
    log: list[str] = []
    a, b, c, d = (recorder(n, log) for n in "abcd")
    nested = Chain([a, Chain([b, Chain([c])]), d])
    assert nested.parts == (a, b, c, d)
    run(nested, 0.0)
    assert log == ["a", "b", "c", "d"]
    outer = chain([chain([a, b]), chain([c, d])])
    assert isinstance(outer, Chain) and outer.parts == (a, b, c, d)


def test_chain_of_one_is_that_processor_and_of_none_is_none() -> None:
    assert chain([double]) is double
    assert chain([None, double, None]) is double
    assert chain([]) is None
    assert chain([None, None]) is None
