"""The disk tier: one file per cached prefix, safe against torn writes and shared directories.

A file is ``MAGIC, version, tag digest, n_tokens, state length, CRC-32`` followed by the token ids
(int32) and llama.cpp's sequence state. It is written to a temporary name and renamed, so a
reader sees a whole file or none; a file whose length or checksum does not match (a crash
mid-write on a filesystem that reorders, a truncation, a bit flip) is deleted, never restored.
Files of other tags (another model, cache type or layout) share the directory and its size
limit but are never indexed. Several tether processes may use one directory: names are unique
per content, eviction runs under an ``flock``, and files another process adds or evicts are
picked up when the directory changes.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

import numpy as np
import structlog

from tether.engine.prefix.entries import ChainIndex, Entry
from tether.engine.prefix.keys import block_chain

__all__ = ["DiskTier", "read_entry", "write_entry"]

log = structlog.get_logger(__name__)

MAGIC = b"TETHERKV"
VERSION = 1
_HEAD = struct.Struct("<8sI16sIQI")  # magic, version, tag digest, n_tokens, state bytes, crc32
SUFFIX = ".kv"


def write_entry(path: Path, salt: bytes, entry: Entry) -> None:
    """Write ``entry`` to ``path`` through a temporary file in the same directory, then rename."""
    tokens = np.ascontiguousarray(entry.tokens, dtype="<i4").tobytes()
    crc = zlib.crc32(entry.state, zlib.crc32(tokens))
    head = _HEAD.pack(MAGIC, VERSION, salt, len(entry.tokens), len(entry.state), crc)
    tmp = path.with_name(f".tmp-{os.getpid()}-{os.urandom(6).hex()}")
    try:
        with tmp.open("wb") as f:
            f.write(head)
            f.write(tokens)
            f.write(entry.state)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


class TornFile(Exception):
    """A file of this tag whose length does not match its header: never to be read."""


def _header(f: BinaryIO, size: int, salt: bytes) -> tuple[int, int, int] | None:
    """(n_tokens, state bytes, crc) of an open file of ``salt``; None for another tag's or a
    file that is not a cache file; ``TornFile`` when it is ours and its length is wrong."""
    raw = f.read(_HEAD.size)
    if len(raw) != _HEAD.size:
        return None
    magic, version, own, n_tokens, n_state, crc = _HEAD.unpack(raw)
    if magic != MAGIC or version != VERSION or own != salt:
        return None
    if size != _HEAD.size + 4 * n_tokens + n_state:
        raise TornFile
    return n_tokens, n_state, crc


def read_tokens(path: Path, salt: bytes) -> np.ndarray | None:
    """The token ids of a file of ``salt`` (its state is not read or checked here)."""
    with path.open("rb") as f:
        head = _header(f, os.fstat(f.fileno()).st_size, salt)
        if head is None:
            return None
        data = f.read(4 * head[0])
    return np.frombuffer(data, dtype="<i4").astype(np.int32)


def read_entry(path: Path, salt: bytes) -> Entry | None:
    """The entry in ``path`` if it is whole, of ``salt``, and its checksum holds; else None."""
    with path.open("rb") as f:
        try:
            head = _header(f, os.fstat(f.fileno()).st_size, salt)
        except TornFile:
            return None
        if head is None:
            return None
        n_tokens, n_state, crc = head
        tokens = f.read(4 * n_tokens)
        state = bytearray(n_state)
        got = f.readinto(state)
    if got != n_state or zlib.crc32(state, zlib.crc32(tokens)) != crc:
        return None
    return Entry(np.frombuffer(tokens, dtype="<i4").astype(np.int32), state)


class DiskTier:
    """Cached prefixes of one tag under ``root``, at most ``limit`` bytes of files in all."""

    def __init__(self, root: Path, *, limit: int, salt: bytes) -> None:
        self.root = root
        self.limit = limit
        self.salt = salt
        self.index = ChainIndex()
        self._sizes: dict[str, int] = {}
        self._seen_mtime = -1
        if not root.exists():
            root.mkdir(parents=True, mode=0o700)
        self._lock_path = root / ".lock"
        self._drop_stale_temporaries()
        self.refresh()

    def _drop_stale_temporaries(self) -> None:
        """Temporary files a killed writer left (an hour old: no live writer takes that long)."""
        cutoff = time.time() - 3600
        with os.scandir(self.root) as it:
            for item in it:
                with contextlib.suppress(OSError):
                    if item.name.startswith(".tmp-") and item.stat().st_mtime < cutoff:
                        os.unlink(item.path)

    @property
    def used(self) -> int:
        return sum(self._sizes.values())

    def _files(self) -> Iterator[os.DirEntry[str]]:
        with os.scandir(self.root) as it:
            yield from (e for e in it if e.name.endswith(SUFFIX) and e.is_file())

    def refresh(self) -> None:
        """Index files added by other processes, forget files gone (cheap when nothing changed)."""
        try:
            mtime = self.root.stat().st_mtime_ns
        except OSError:
            return
        if mtime == self._seen_mtime:
            return
        self._seen_mtime = mtime
        present: dict[str, int] = {}
        for item in self._files():
            with contextlib.suppress(OSError):
                present[item.name] = item.stat().st_size
        for name in [n for n in self.index.names() if n not in present]:
            self._forget(name)
        for name, size in present.items():
            if name in self.index:
                continue
            try:
                tokens = read_tokens(self.root / name, self.salt)
            except TornFile:
                self._reject(self.root / name)
                continue
            except OSError:
                continue
            if tokens is not None:
                self.index.add(name, block_chain(tokens, self.salt))
                self._sizes[name] = size

    def _reject(self, path: Path) -> None:
        log.warning("prefix_cache_file_rejected", file=str(path), reason="truncated or corrupt")
        with contextlib.suppress(OSError):
            path.unlink()

    def _forget(self, name: str) -> None:
        self.index.remove(name)
        self._sizes.pop(name, None)

    def longest(self, chain: list[bytes]) -> tuple[int, str] | None:
        self.refresh()
        return self.index.longest(chain)

    def load(self, name: str) -> Entry | None:
        """The entry stored as ``name``; a torn or foreign file is deleted and forgotten."""
        path = self.root / name
        try:
            entry = read_entry(path, self.salt)
        except FileNotFoundError:  # another process evicted it since the index was read
            self._forget(name)
            return None
        except OSError:
            entry = None
        if entry is None:
            self._reject(path)
            self._forget(name)
            return None
        with contextlib.suppress(OSError):
            os.utime(path)  # its place in the LRU order
        return entry

    def store(self, name: str, entry: Entry, chain: list[bytes]) -> None:
        """Write ``entry`` as ``name`` (``OSError`` when the disk refuses), then evict down to the limit."""
        write_entry(self.root / name, self.salt, entry)
        self.index.add(name, chain)
        self._sizes[name] = _HEAD.size + int(entry.tokens.nbytes) + len(entry.state)
        self.evict()

    def evict(self) -> None:
        """Delete the least recently used files of the directory (every tag's) until it fits."""
        with self._lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            files: list[tuple[int, int, str]] = []
            for item in self._files():
                with contextlib.suppress(OSError):
                    st = item.stat()
                    files.append((st.st_mtime_ns, st.st_size, item.name))
            total = sum(size for _, size, _ in files)
            for _, size, name in sorted(files):
                if total <= self.limit:
                    break
                with contextlib.suppress(OSError):
                    (self.root / name).unlink()
                total -= size
                self._forget(name)
