"""Continuous batching on llama.cpp: many requests advanced together in one context.

See :mod:`tether.engine.batch.runner` for how a step is filled and :mod:`tether.engine.batch.draft`
for jump-forward and prompt-lookup speculation.
"""

from tether.engine.batch.engine import BatchedLlama, BatchSlot
from tether.engine.batch.runner import BatchOptions

__all__ = ["BatchOptions", "BatchSlot", "BatchedLlama"]
