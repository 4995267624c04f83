"""A two-tier prefix KV cache (RAM and disk) shared by an engine's slots (docs/prefix-cache.md)."""

from tether.engine.prefix.cache import Hit, PrefixCache, PrefixCacheStats
from tether.engine.prefix.keys import BLOCK, CacheTag, block_chain, model_fingerprint
from tether.engine.prefix.llama_state import keep_seq, llama_tag, load_seq, save_seq

__all__ = [
    "BLOCK",
    "CacheTag",
    "Hit",
    "PrefixCache",
    "PrefixCacheStats",
    "block_chain",
    "keep_seq",
    "llama_tag",
    "load_seq",
    "model_fingerprint",
    "save_seq",
]
