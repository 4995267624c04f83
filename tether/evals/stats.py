"""Small-sample statistics for accuracy comparisons: Wilson intervals, Newcombe paired deltas, McNemar.

Everything here is closed-form and dependency-free, so the HTML report and the
terminal tables compute the same numbers.

* :func:`wilson` — the Wilson score interval for one proportion ``k / n``.
* :func:`paired_delta` — the difference of two paired proportions with Newcombe's
  (1998, method 10) interval, built from the two Wilson intervals and the
  correlation of the paired outcomes.
* :func:`mcnemar_exact` — McNemar's test on the discordant pairs, as an exact
  two-sided binomial test (no chi-square approximation: the counts are small).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["PairedDelta", "mcnemar_exact", "paired_delta", "wilson"]

Z95 = 1.959963984540054


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval for ``k`` successes in ``n`` trials; ``(0, 1)`` when ``n == 0``."""
    if n <= 0:
        return 0.0, 1.0
    if not 0 <= k <= n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    centre = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value for ``b`` pairs right only in A and ``c`` right only in B.

    Under the null the discordant pairs split Binomial(b + c, 1/2); the p-value is
    twice the smaller tail, capped at 1. No discordant pairs gives 1.
    """
    if b < 0 or c < 0:
        raise ValueError("discordant counts must be non-negative")
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n
    return min(1.0, 2.0 * tail)


@dataclass(frozen=True)
class PairedDelta:
    """B minus A on the same items: the delta, its Newcombe 95 % interval and McNemar's p."""

    n: int
    acc_a: float
    acc_b: float
    delta: float
    low: float
    high: float
    only_a: int
    only_b: int
    p_value: float


def paired_delta(a: Sequence[bool], b: Sequence[bool], z: float = Z95) -> PairedDelta:
    """Compare paired outcomes (``a[i]`` and ``b[i]`` are the same item under two configurations)."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need equal lengths, got {len(a)} and {len(b)}")
    n = len(a)
    both = sum(1 for x, y in zip(a, b, strict=True) if x and y)
    only_a = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    only_b = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    neither = n - both - only_a - only_b
    if n == 0:
        return PairedDelta(0, 0.0, 0.0, 0.0, -1.0, 1.0, 0, 0, 1.0)
    ka, kb = both + only_a, both + only_b
    pa, pb = ka / n, kb / n
    la, ua = wilson(ka, n, z)
    lb, ub = wilson(kb, n, z)
    delta = pb - pa
    # Newcombe's method 10: phi is the correlation of the 2x2 table (0 when a margin is empty).
    margins = (both + only_a) * (neither + only_b) * (both + only_b) * (neither + only_a)
    phi = (both * neither - only_a * only_b) / math.sqrt(margins) if margins > 0 else 0.0
    d_low = math.sqrt(max(0.0, (pb - lb) ** 2 - 2 * phi * (pb - lb) * (ua - pa) + (ua - pa) ** 2))
    d_high = math.sqrt(max(0.0, (ub - pb) ** 2 - 2 * phi * (ub - pb) * (pa - la) + (pa - la) ** 2))
    return PairedDelta(
        n=n,
        acc_a=pa,
        acc_b=pb,
        delta=delta,
        low=max(-1.0, delta - d_low),
        high=min(1.0, delta + d_high),
        only_a=only_a,
        only_b=only_b,
        p_value=mcnemar_exact(only_a, only_b),
    )
