"""Read ``tokenizer.chat_template`` (or any metadata value) from a GGUF file header.

A small self-contained reader of the GGUF v2/v3 metadata section (little-endian):
magic ``GGUF``, ``uint32`` version, ``uint64`` tensor count, ``uint64`` metadata
count, then key/value pairs where a key is a GGUF string (``uint64`` length +
UTF-8 bytes) followed by a ``uint32`` value type. Arrays are skipped without being
kept in memory (the token list of a vocabulary is large). No llama.cpp needed.
"""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any, BinaryIO

from tether.errors import FormatError

__all__ = ["CHAT_TEMPLATE_KEY", "read_chat_template", "read_metadata_value"]

CHAT_TEMPLATE_KEY = "tokenizer.chat_template"

_SCALARS: dict[int, str] = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
_STRING = 8
_ARRAY = 9
_MAX_STRING = 64 * 1024 * 1024


class _Reader:
    def __init__(self, fh: BinaryIO, path: Path) -> None:
        self.fh = fh
        self.path = path

    def bytes(self, n: int) -> bytes:
        data = self.fh.read(n)
        if len(data) != n:
            raise FormatError(f"{self.path}: truncated GGUF metadata")
        return data

    def unpack(self, fmt: str) -> Any:
        return struct.unpack(fmt, self.bytes(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        n = self.unpack("<Q")
        if n > _MAX_STRING:
            raise FormatError(f"{self.path}: implausible GGUF string length {n}")
        return self.bytes(n).decode("utf-8", errors="replace")

    def skip_string(self) -> None:
        n = self.unpack("<Q")
        self.fh.seek(n, 1)

    def value(self, vtype: int, keep: bool) -> Any:
        if vtype in _SCALARS:
            return self.unpack(_SCALARS[vtype])
        if vtype == _STRING:
            if keep:
                return self.string()
            self.skip_string()
            return None
        if vtype == _ARRAY:
            itype = self.unpack("<I")
            count = self.unpack("<Q")
            if not keep and itype in _SCALARS:
                self.fh.seek(struct.calcsize(_SCALARS[itype]) * count, 1)
                return None
            items = [self.value(itype, keep) for _ in range(count)]
            return items if keep else None
        raise FormatError(f"{self.path}: unknown GGUF value type {vtype}")


def read_metadata_value(path: str | Path, key: str) -> Any:
    """The metadata value stored under ``key``, or None when the file has no such key.

    Raises ``FormatError`` when the file is not a readable GGUF (v2 or v3).
    """
    p = Path(path)
    try:
        fh = p.open("rb")
    except OSError as exc:
        raise FormatError(f"cannot open {p}: {exc.strerror}") from exc
    with fh:
        r = _Reader(fh, p)
        if r.bytes(4) != b"GGUF":
            raise FormatError(f"{p} is not a GGUF file")
        version = r.unpack("<I")
        if version not in (2, 3):
            raise FormatError(f"{p}: unsupported GGUF version {version}")
        r.unpack("<Q")  # tensor count
        count = r.unpack("<Q")
        for _ in range(count):
            name = r.string()
            vtype = r.unpack("<I")
            if name == key:
                return r.value(vtype, keep=True)
            r.value(vtype, keep=False)
    return None


def read_chat_template(path: str | Path) -> str | None:
    """The jinja chat template embedded in a GGUF, or None when it has none."""
    value = read_metadata_value(path, CHAT_TEMPLATE_KEY)
    return value if isinstance(value, str) else None
