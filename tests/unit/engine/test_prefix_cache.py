"""The prefix cache without a model: block keys, the RAM tier's LRU, the disk tier's file safety
(torn, corrupt, foreign files; stale temporaries; 0700; eviction), a disk that refuses writes,
and two processes sharing one directory."""

from __future__ import annotations

import multiprocessing
import os
import stat
import sys
from pathlib import Path

import numpy as np
import pytest

from tether.engine.prefix import BLOCK, CacheTag, PrefixCache, block_chain
from tether.engine.prefix.disk import DiskTier, read_entry, write_entry
from tether.engine.prefix.entries import ChainIndex, Entry


def tag(model: str = "m1", **kw: object) -> CacheTag:
    fields: dict[str, object] = {
        "model": model,
        "layout": "serial",
        "n_ctx": 4096,
        "cache_type_k": "f16",
        "cache_type_v": "f16",
        "flash_attn": "default",
        "runtime": "test",
    }
    fields.update(kw)
    return CacheTag(**fields)  # type: ignore[arg-type]


def tokens(n: int, seed: int = 0) -> list[int]:
    return [int(t) for t in np.random.default_rng(seed).integers(0, 49152, size=n)]


def state(n: int, fill: int = 7) -> bytearray:
    return bytearray([fill]) * n


def stored(cache: PrefixCache, ids: list[int], size: int = 1000) -> None:
    chain = cache.wants(ids)
    assert chain is not None
    cache.put(ids, state(size), chain)


# -- keys -------------------------------------------------------------------------------------------


def test_the_chain_of_a_prefix_is_a_prefix_of_the_chain() -> None:
    ids = tokens(5 * BLOCK + 17)
    salt = tag().digest()
    full = block_chain(ids, salt)
    assert len(full) == 5
    assert block_chain(ids[: 3 * BLOCK + 1], salt) == full[:3]
    changed = [*ids[: 2 * BLOCK], ids[2 * BLOCK] + 1, *ids[2 * BLOCK + 1 :]]
    assert block_chain(changed, salt)[:2] == full[:2] and block_chain(changed, salt)[2] != full[2]


def test_another_tag_never_shares_a_key() -> None:
    ids = tokens(2 * BLOCK)
    keys = {
        bytes(block_chain(ids, t.digest())[0])
        for t in (tag(), tag("m2"), tag(cache_type_k="q8_0"), tag(n_ctx=8192), tag(layout="batched"))
    }
    assert len(keys) == 5


def test_the_index_finds_the_entry_with_the_most_leading_blocks() -> None:
    salt = tag().digest()
    a, b = tokens(4 * BLOCK, 1), tokens(4 * BLOCK, 1)[: 2 * BLOCK] + tokens(2 * BLOCK, 2)
    index = ChainIndex()
    index.add("a", block_chain(a, salt))
    index.add("b", block_chain(b, salt))
    assert index.longest(block_chain(a + tokens(BLOCK, 3), salt)) == (4, "a")
    assert index.longest(block_chain(b, salt)) == (4, "b")
    assert index.longest(block_chain(a[: 2 * BLOCK] + tokens(2 * BLOCK, 4), salt)) in ((2, "a"), (2, "b"))
    assert index.longest(block_chain(tokens(4 * BLOCK, 5), salt)) is None
    index.remove("a")
    assert index.longest(block_chain(a, salt)) == (2, "b")


# -- the RAM tier -----------------------------------------------------------------------------------


def test_a_lookup_loads_the_longest_prefix_that_beats_the_sequence_by_a_block() -> None:
    cache = PrefixCache(tag(), ram_bytes=1 << 20)
    ids = tokens(6 * BLOCK)
    stored(cache, ids)
    prompt = ids[: 5 * BLOCK + 10] + tokens(300, 9)
    hit = cache.lookup(prompt, have=0)
    assert hit is not None and hit.tier == "ram" and list(hit.entry.tokens) == ids
    assert cache.lookup(prompt, have=4 * BLOCK + 1) is None  # 5 blocks are not a block more than that
    assert cache.lookup(prompt, have=4 * BLOCK - 1) is not None
    assert cache.lookup(tokens(6 * BLOCK, 8), have=0) is None
    assert cache.lookup(ids[:BLOCK], have=0) is None  # shorter than min_tokens: not looked up
    snap = cache.snapshot()
    assert snap["ram"]["hits"] == 2 and snap["misses"] == 2 and "disk" not in snap


def test_what_a_tier_holds_whole_is_not_stored_again() -> None:
    cache = PrefixCache(tag(), ram_bytes=1 << 20)
    ids = tokens(3 * BLOCK + 5)
    stored(cache, ids)
    assert cache.wants(ids) is None
    assert cache.wants(ids[: 3 * BLOCK]) is None  # the same whole blocks
    assert cache.wants(ids + tokens(BLOCK, 1)) is not None  # a block more
    assert cache.wants(ids[: BLOCK + 5]) is None  # too short to be worth it


def test_the_ram_tier_drops_the_least_recently_used_to_stay_in_bytes() -> None:
    one = 1000 + 4 * 2 * BLOCK  # a state of 1000 bytes and its token ids
    cache = PrefixCache(tag(), ram_bytes=2 * one)
    a, b, c = (tokens(2 * BLOCK, s) for s in (1, 2, 3))
    stored(cache, a)
    stored(cache, b)
    assert cache.lookup(a, have=0) is not None  # a is now the most recently used
    stored(cache, c)
    assert cache.lookup(b, have=0) is None
    assert cache.lookup(a, have=0) is not None and cache.lookup(c, have=0) is not None
    assert cache.snapshot()["ram"]["bytes"] == 2 * one
    big = PrefixCache(tag(), ram_bytes=500)
    stored(big, a)  # larger than the whole tier: not kept
    assert big.snapshot()["ram"]["entries"] == 0


# -- the disk tier ----------------------------------------------------------------------------------


def test_a_disk_entry_survives_a_new_cache_on_the_same_directory(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    first = PrefixCache(tag(), ram_bytes=1 << 20, disk_dir=root, disk_bytes=1 << 30)
    ids = tokens(4 * BLOCK)
    stored(first, ids, size=5000)
    first.close()
    assert stat.S_IMODE(root.stat().st_mode) == 0o700
    second = PrefixCache(tag(), ram_bytes=1 << 20, disk_dir=root, disk_bytes=1 << 30)
    hit = second.lookup(ids + tokens(40, 1), have=0)
    assert hit is not None and hit.tier == "disk" and hit.entry.state == state(5000)
    assert second.lookup(ids + tokens(40, 1), have=0).tier == "ram"  # type: ignore[union-attr]
    other = PrefixCache(tag("another model"), ram_bytes=1 << 20, disk_dir=root, disk_bytes=1 << 30)
    assert other.lookup(ids + tokens(40, 1), have=0) is None
    assert other.snapshot()["disk"]["entries"] == 0


@pytest.mark.parametrize("damage", ["truncated", "flipped", "header"])
def test_a_torn_or_corrupt_file_is_never_restored(tmp_path: Path, damage: str) -> None:
    root = tmp_path / "cache"
    first = PrefixCache(tag(), ram_bytes=1 << 20, disk_dir=root, disk_bytes=1 << 30)
    ids = tokens(2 * BLOCK)
    stored(first, ids, size=4000)
    first.close()
    (path,) = root.glob("*.kv")
    data = bytearray(path.read_bytes())
    if damage == "truncated":
        data = data[: len(data) - 100]  # a writer killed mid-write, or a disk that filled up
    elif damage == "flipped":
        data[-10] ^= 0xFF
    else:
        data[:8] = b"NOTAKV!!"
    path.write_bytes(bytes(data))
    second = PrefixCache(tag(), ram_bytes=1 << 20, disk_dir=root, disk_bytes=1 << 30)
    if damage == "truncated":  # its length disagrees with its header: removed when the directory is read
        assert not path.exists()
    assert second.lookup([*ids, 1, 2, 3], have=0) is None
    if damage == "flipped":  # indexed by its (intact) tokens, removed when its checksum fails
        assert not path.exists()
    if damage == "header":  # not a cache file: left alone, never read
        assert path.exists() and read_entry(path, second.salt) is None


def test_a_killed_writers_temporary_file_is_cleared_and_never_read(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    stale = root / ".tmp-123-abcdef"
    stale.write_bytes(b"half a state")
    fresh = root / ".tmp-456-abcdef"
    fresh.write_bytes(b"being written now")
    os.utime(stale, (1, 1))
    tier = DiskTier(root, limit=1 << 30, salt=tag().digest())
    assert not stale.exists() and fresh.exists() and len(tier.index) == 0


def test_the_disk_tier_evicts_the_least_recently_used_files_of_the_directory(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    salt = tag().digest()
    tier = DiskTier(root, limit=21_000, salt=salt)  # two files of 10,092 bytes fit, three do not
    entries = [Entry(np.array(tokens(2 * BLOCK, s), dtype=np.int32), state(8000)) for s in range(3)]
    for k, entry in enumerate(entries[:2]):
        tier.store(f"e{k}.kv", entry, block_chain(entry.tokens, salt))
        os.utime(root / f"e{k}.kv", (1000 + k, 1000 + k))
    assert tier.load("e0.kv") is not None  # used: now the most recent
    tier.store("e2.kv", entries[2], block_chain(entries[2].tokens, salt))
    assert sorted(p.name for p in root.glob("*.kv")) == ["e0.kv", "e2.kv"]
    foreign = Entry(np.array(tokens(2 * BLOCK, 9), dtype=np.int32), state(8000))
    write_entry(root / "foreign.kv", tag("m2").digest(), foreign)  # another model's, same directory
    os.utime(root / "foreign.kv", (500, 500))
    tier.evict()
    assert sorted(p.name for p in root.glob("*.kv")) == ["e0.kv", "e2.kv"]  # the foreign file was oldest
    assert tier.longest(block_chain(entries[1].tokens, salt)) is None
    assert sum(p.stat().st_size for p in root.glob("*.kv")) <= 21_000


_FULL_DISK = r"""
import resource, signal, sys
import numpy as np
from pathlib import Path
from tether.engine.prefix import PrefixCache, CacheTag, block_chain
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails with EFBIG instead
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))  # files of at most 4 KiB: a disk that is full
tag = CacheTag("m", "serial", 4096, "f16", "f16", "default", "test")
cache = PrefixCache(tag, ram_bytes=1 << 24, disk_dir=Path(sys.argv[1]), disk_bytes=1 << 30)
for seed in range(3):
    ids = [int(t) for t in np.random.default_rng(seed).integers(0, 1000, size=600)]
    cache.put(ids, bytearray(20000), cache.wants(ids))
cache.close()
snap = cache.snapshot()
print(snap["disk"]["errors"], snap["disk"]["writable"], snap["ram"]["entries"], snap["stored"])
ids = [int(t) for t in np.random.default_rng(1).integers(0, 1000, size=600)]
print(cache.lookup(ids + [5], have=0).tier)
"""


def test_a_full_disk_degrades_to_ram_with_one_warning(tmp_path: Path) -> None:
    import subprocess

    root = tmp_path / "cache"
    out = subprocess.run(
        [sys.executable, "-c", _FULL_DISK, str(root)], capture_output=True, text=True, timeout=60, check=True
    )
    lines = out.stdout.splitlines()
    assert lines[-2:] == ["1 False 3 3", "ram"], out.stdout + out.stderr
    assert (out.stdout + out.stderr).count("prefix_cache_disk_disabled") == 1, out.stdout
    assert not list(root.glob("*.kv")) and not list(root.glob(".tmp-*"))  # nothing half-written is left


def _writer(root: str, seed: int, n: int) -> None:
    cache = PrefixCache(tag(), ram_bytes=0, disk_dir=Path(root), disk_bytes=60_000)
    rng = np.random.default_rng(seed)
    for k in range(n):
        ids = [int(t) for t in rng.integers(0, 49152, size=2 * BLOCK)]
        chain = cache.wants(ids)
        if chain is not None:
            cache.put(ids, bytearray([k % 251]) * 9000, chain)
        cache.lookup([*ids, 1], have=0)
    cache.close()


def test_two_processes_on_one_directory_leave_only_whole_files(tmp_path: Path) -> None:
    root = tmp_path / "cache"
    root.mkdir(mode=0o700)
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_writer, args=(str(root), seed, 25)) for seed in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
        assert p.exitcode == 0
    files = list(root.glob("*.kv"))
    assert files and not list(root.glob(".tmp-*"))
    salt = tag().digest()
    assert all(read_entry(path, salt) is not None for path in files)
    assert sum(p.stat().st_size for p in files) <= 60_000  # every store is followed by its eviction


def test_a_directory_that_cannot_be_one_is_a_clear_error(tmp_path: Path) -> None:
    from tether.config import ServerConfig
    from tether.errors import ConfigError
    from tether.server import prefix_cache

    model = tmp_path / "model.gguf"
    model.write_bytes(b"GGUF" + bytes(100))
    taken = tmp_path / "a-file"
    taken.write_text("not a directory")
    config = ServerConfig(prefix_cache_dir=str(taken / "prefix"))
    with pytest.raises(ConfigError, match=r"--prefix-cache-dir .*a-file/prefix: cannot use it"):
        prefix_cache(config, model, layout="serial", n_ctx=4096)
    assert prefix_cache(ServerConfig(prefix_cache_ram_bytes=0), model, layout="serial", n_ctx=4096) is None


def test_the_tag_names_the_attention_each_layout_runs(tmp_path: Path) -> None:
    """The V cache's layout follows flash attention: the serial engine's Llama has it off, the batched
    context lets llama.cpp choose unless forced; state from one never loads into another."""
    from tether.engine.llama_options import LlamaOptions
    from tether.engine.prefix import llama_tag

    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF" + bytes(64))
    tags = {
        (layout, forced): llama_tag(model, LlamaOptions(flash_attn=forced), layout=layout, n_ctx=2048)
        for layout in ("serial", "batched")
        for forced in (None, False, True)
    }
    assert {k: t.flash_attn for k, t in tags.items()} == {
        ("serial", None): "off",
        ("serial", False): "off",
        ("serial", True): "on",
        ("batched", None): "auto",
        ("batched", False): "off",
        ("batched", True): "on",
    }
    assert tags["serial", None] == tags["serial", False]  # the same context either way
    assert len({t.digest() for t in tags.values()}) == 5
