"""The tokenizer side of an MLX model directory, read with ``tokenizers`` (no ``transformers``).

``TokenizerFiles.load`` reads ``tokenizer.json`` plus ``tokenizer_config.json`` (chat template,
BOS/EOS), ``config.json`` and ``generation_config.json`` (EOS ids), and derives what the grammar
layer needs: the raw bytes of every token id (``pieces``), the control ids and the end-of-generation
ids. Byte-level BPE vocabularies (GPT-2 style, the SmolLM2 family) and SentencePiece-style ones
(``▁`` for spaces, ``<0xNN>`` byte fallback) are decoded exactly.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer

from tether.engine.mlx.gguf_tokenizer import EOG_TEXTS
from tether.engine.tokenizer_config import token_text
from tether.errors import ConfigError

__all__ = ["TokenizerFiles", "byte_decoder", "read_json"]


@cache
def byte_decoder() -> dict[str, int]:
    """GPT-2's unicode-character -> byte table (the inverse of ``bytes_to_unicode``)."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars = list(printable)
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


def read_json(path: Path) -> dict[str, Any]:
    """A JSON object from ``path``, or ``{}`` when the file does not exist."""
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ConfigError(f"{path} does not hold a JSON object")
    return data


def _ids(value: Any) -> set[int]:
    if isinstance(value, int):
        return {value}
    if isinstance(value, list):
        return {int(v) for v in value if isinstance(v, int)}
    return set()


def _decoder_kind(decoder: Mapping[str, Any] | None) -> str:
    if not decoder:
        return "plain"
    kind = decoder.get("type")
    if kind == "ByteLevel":
        return "byte_level"
    if kind == "Sequence":
        kinds = {d.get("type") for d in decoder.get("decoders", [])}
        if "ByteLevel" in kinds:
            return "byte_level"
        if "ByteFallback" in kinds or "Replace" in kinds:
            return "metaspace"
    if kind == "Metaspace":
        return "metaspace"
    return "plain"


def _chat_template(model_dir: Path, config: Mapping[str, Any]) -> str | None:
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default") or next(iter(named.values()), None)
    if isinstance(template, str):
        return template
    jinja = model_dir / "chat_template.jinja"
    return jinja.read_text(encoding="utf-8") if jinja.is_file() else None


@dataclass(frozen=True)
class TokenizerFiles:
    """A model directory's tokenizer and the vocabulary facts derived from it."""

    tokenizer: Tokenizer
    plain: Tokenizer  # the same vocabulary with special-token text left unparsed
    pieces: list[bytes]
    control_ids: frozenset[int]
    eos_ids: frozenset[int]
    bos_token: str
    eos_token: str
    chat_template: str | None

    @classmethod
    def load(cls, model_dir: Path, *, n_vocab: int) -> TokenizerFiles:
        """Read the tokenizer of ``model_dir``; ``n_vocab`` is the model's logits width."""
        path = model_dir / "tokenizer.json"
        if not path.is_file():
            raise ConfigError(f"{model_dir} has no tokenizer.json (needed by the MLX engine)")
        raw = path.read_text(encoding="utf-8")
        spec = json.loads(raw)
        tokenizer = Tokenizer.from_str(raw)
        plain = Tokenizer.from_str(raw)
        plain.encode_special_tokens = True
        tok_config = read_json(model_dir / "tokenizer_config.json")
        model_config = read_json(model_dir / "config.json")
        generation = read_json(model_dir / "generation_config.json")

        added = {int(t["id"]): t for t in spec.get("added_tokens", [])}
        control = frozenset(i for i, t in added.items() if t.get("special") and i < n_vocab)
        pieces = _pieces(tokenizer, added, _decoder_kind(spec.get("decoder")), n_vocab)

        bos = token_text(tok_config.get("bos_token")) or ""
        eos = token_text(tok_config.get("eos_token")) or ""
        eos_ids = _ids(model_config.get("eos_token_id")) | _ids(generation.get("eos_token_id"))
        if eos and (eos_id := tokenizer.token_to_id(eos)) is not None:
            eos_ids.add(eos_id)
        eos_ids |= {i for i in control if added[i].get("content") in EOG_TEXTS}
        eos_ids = {i for i in eos_ids if 0 <= i < n_vocab}
        if not eos and eos_ids:
            eos = pieces[min(eos_ids)].decode("utf-8", errors="replace")
        return cls(
            tokenizer=tokenizer,
            plain=plain,
            pieces=pieces,
            control_ids=control,
            eos_ids=frozenset(eos_ids),
            bos_token=bos,
            eos_token=eos,
            chat_template=_chat_template(model_dir, tok_config),
        )


def _pieces(tokenizer: Tokenizer, added: Mapping[int, Any], kind: str, n_vocab: int) -> list[bytes]:
    """The bytes each id stands for (``b""`` for ids the tokenizer does not define)."""
    table = byte_decoder()
    out: list[bytes] = []
    for i in range(n_vocab):
        if i in added:
            out.append(str(added[i]["content"]).encode("utf-8"))
            continue
        token = tokenizer.id_to_token(i)
        if token is None:
            out.append(b"")
        elif kind == "byte_level":
            try:
                out.append(bytes(table[c] for c in token))
            except KeyError:
                out.append(token.encode("utf-8"))
        elif kind == "metaspace":
            if len(token) == 6 and token.startswith("<0x") and token.endswith(">"):
                out.append(bytes([int(token[3:5], 16)]))
            else:
                out.append(token.replace("▁", " ").encode("utf-8"))
        else:
            out.append(tokenizer.decode([i], skip_special_tokens=False).encode("utf-8"))
    return out
