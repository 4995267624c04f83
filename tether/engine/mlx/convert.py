"""GGUF -> MLX model directory: dequantized weights, ``config.json`` and a rebuilt tokenizer.

``gguf_to_mlx`` reads a llama-architecture GGUF (the bundled SmolLM2 Q4_1 is one) with the ``gguf``
package, dequantizes every tensor to float, renames it to the Hugging Face / mlx-lm ``llama`` layout,
undoes llama.cpp's rotary permutation of the Q and K projections, and writes a directory that
``mlx_lm`` (and ``MlxEngine``) load directly. ``quantize=True`` writes MLX's affine quantized
format (groups of 32) instead: llama.cpp's Q4_0/Q4_1/Q8_0 blocks are 32 values with a scale (and
a minimum), so they are repacked *exactly* (the bundled Q4_1 projections as 4-bit, its Q8_0
embedding as 8-bit); any other matrix is quantized with ``mx.quantize``.

``cached_gguf_to_mlx`` converts once into ``~/.cache/tether/mlx/<key>`` (``TETHER_MLX_CACHE`` or
``XDG_CACHE_HOME`` move it); the key covers the GGUF file's identity and the conversion options.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeVar

import numpy as np
import numpy.typing as npt

from tether.engine.llama_cpp import model_id_for
from tether.engine.mlx.gguf_tokenizer import GgufVocab, eog_token_ids, write_tokenizer_files
from tether.errors import ConfigError

__all__ = [
    "CONVERTER_VERSION",
    "DType",
    "cached_gguf_to_mlx",
    "default_cache_dir",
    "gguf_to_mlx",
    "main",
    "read_gguf_metadata",
]

_T = TypeVar("_T", bound=np.generic)

CONVERTER_VERSION = 2
DType = Literal["float32", "float16", "bfloat16"]
QUANT_GROUP_SIZE = 32

# GGUF tensor name (after ``blk.N.``) -> mlx-lm llama parameter name (after ``model.layers.N.``).
_LAYER_TENSORS = {
    "attn_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
    "attn_q.weight": "self_attn.q_proj.weight",
    "attn_k.weight": "self_attn.k_proj.weight",
    "attn_v.weight": "self_attn.v_proj.weight",
    "attn_output.weight": "self_attn.o_proj.weight",
    "ffn_gate.weight": "mlp.gate_proj.weight",
    "ffn_up.weight": "mlp.up_proj.weight",
    "ffn_down.weight": "mlp.down_proj.weight",
}
_GLOBAL_TENSORS = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}


def read_gguf_metadata(reader: Any) -> dict[str, Any]:
    """A GGUF reader's key/value fields as plain Python values (the ``GGUF.*`` header keys left out)."""
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def _unpermute(w: npt.NDArray[_T], n_head: int) -> npt.NDArray[_T]:
    """Undo llama.cpp's Q/K row permutation (GGUF interleaves each head's rotary halves)."""
    rows = w.shape[0]
    return w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _model_config(
    meta: dict[str, Any], vocab: GgufVocab, has_output: bool, gguf_path: Path
) -> dict[str, Any]:
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise ConfigError(f"only llama-architecture GGUF files can be converted to MLX, not {arch!r}")

    def get(key: str, default: Any = None) -> Any:
        value = meta.get(f"llama.{key}", default)
        if value is None:
            raise ConfigError(f"GGUF metadata lacks llama.{key}")
        return value

    hidden = int(get("embedding_length"))
    heads = int(get("attention.head_count"))
    head_dim = int(meta.get("llama.attention.key_length", hidden // heads))
    rope_dim = int(meta.get("llama.rope.dimension_count", head_dim))
    if rope_dim != head_dim:
        raise ConfigError(f"partial rotary embeddings ({rope_dim} of {head_dim}) are not supported")
    config: dict[str, Any] = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": int(get("block_count")),
        "intermediate_size": int(get("feed_forward_length")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(meta.get("llama.attention.head_count_kv", heads)),
        "head_dim": head_dim,
        "rms_norm_eps": float(get("attention.layer_norm_rms_epsilon")),
        "rope_theta": float(meta.get("llama.rope.freq_base", 10000.0)),
        "vocab_size": int(meta.get("llama.vocab_size", len(vocab.tokens))),
        "max_position_embeddings": int(get("context_length")),
        "tie_word_embeddings": not has_output,
        "bos_token_id": vocab.bos_id,
        "eos_token_id": eog_token_ids(vocab),
    }
    scaling = meta.get("llama.rope.scaling.type")
    if scaling == "linear":
        config["rope_scaling"] = {"type": "linear", "factor": float(meta["llama.rope.scaling.factor"])}
    elif scaling not in (None, "none"):
        raise ConfigError(f"rope scaling {scaling!r} is not supported")
    config["tether"] = {
        "converter_version": CONVERTER_VERSION,
        "source": gguf_path.name,
        "model_id": model_id_for(gguf_path, {k: str(v) for k, v in meta.items() if isinstance(v, str | int)}),
    }
    return config


def _mlx_name(gguf_name: str) -> str:
    if gguf_name in _GLOBAL_TENSORS:
        return _GLOBAL_TENSORS[gguf_name]
    parts = gguf_name.split(".", 2)
    if len(parts) == 3 and parts[0] == "blk" and parts[2] in _LAYER_TENSORS:
        return f"model.layers.{parts[1]}.{_LAYER_TENSORS[parts[2]]}"
    raise ConfigError(f"GGUF tensor {gguf_name!r} has no place in the MLX llama layout")


@dataclass
class _Weight:
    """One tensor: its float values and, for a block-quantized GGUF type, the blocks themselves."""

    value: npt.NDArray[np.float32]
    blocks: _Blocks | None = None


@dataclass
class _Blocks:
    """A llama.cpp block-quantized matrix as MLX affine parts: ``w = scale * q + bias`` per 32 values."""

    q: npt.NDArray[np.uint8]  # (rows, cols), unsigned codes
    scales: npt.NDArray[np.float32]  # (rows, cols / 32)
    biases: npt.NDArray[np.float32]
    bits: int

    def permuted(self, n_head: int) -> _Blocks:
        return _Blocks(
            _unpermute(self.q, n_head),
            _unpermute(self.scales, n_head),
            _unpermute(self.biases, n_head),
            self.bits,
        )

    def packed(self) -> npt.NDArray[np.uint32]:
        """MLX's packing: ``32 / bits`` codes per little-endian uint32, element ``j`` at bit ``bits * j``."""
        per = 32 // self.bits
        rows, cols = self.q.shape
        shifts = (self.bits * np.arange(per, dtype=np.uint32)).astype(np.uint32)
        words = self.q.reshape(rows, cols // per, per).astype(np.uint32) << shifts
        packed: npt.NDArray[np.uint32] = np.bitwise_or.reduce(words, axis=-1).astype(np.uint32)
        return packed


def _f16(raw: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
    return np.ascontiguousarray(raw).view(np.float16)[..., 0].astype(np.float32)


def _split_blocks(type_name: str, raw: npt.NDArray[np.uint8], rows: int, cols: int) -> _Blocks | None:
    """Q4_0, Q4_1 and Q8_0 blocks (32 values each) map exactly onto MLX's 4/8-bit groups of 32."""
    nb = cols // QUANT_GROUP_SIZE
    if type_name in ("Q4_0", "Q4_1"):
        head = 2 if type_name == "Q4_0" else 4
        blocks = raw.reshape(rows, nb, head + 16)
        d = _f16(blocks[..., 0:2])
        qs = blocks[..., head:]
        q = np.concatenate([qs & 0x0F, qs >> 4], axis=-1).reshape(rows, cols)  # low nibbles hold values 0..15
        m = _f16(blocks[..., 2:4]) if type_name == "Q4_1" else -8.0 * d
        return _Blocks(q.astype(np.uint8), d, m, 4)
    if type_name == "Q8_0":
        blocks = raw.reshape(rows, nb, 34)
        d = _f16(blocks[..., 0:2])
        q = (np.ascontiguousarray(blocks[..., 2:]).view(np.int8).astype(np.int16) + 128).reshape(rows, cols)
        return _Blocks(q.astype(np.uint8), d, -128.0 * d, 8)
    return None


def _load_weights(reader: Any, config: dict[str, Any]) -> dict[str, _Weight]:
    from gguf.quants import dequantize

    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    out: dict[str, _Weight] = {}
    for tensor in reader.tensors:
        name = _mlx_name(tensor.name)
        w = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        blocks = None
        if w.ndim == 2 and w.shape[1] % QUANT_GROUP_SIZE == 0:
            blocks = _split_blocks(tensor.tensor_type.name, np.asarray(tensor.data), *w.shape)
        n_head = (
            heads if name.endswith("q_proj.weight") else kv_heads if name.endswith("k_proj.weight") else 0
        )
        if n_head:
            w = _unpermute(w, n_head)
            blocks = blocks.permuted(n_head) if blocks is not None else None
        out[name] = _Weight(w, blocks)
    return out


def _save_weights(
    weights: dict[str, _Weight], out_dir: Path, dtype: DType, quantize: bool
) -> dict[str, Any] | None:
    """Write ``model.safetensors``; returns the ``quantization`` config entry when quantized.

    Quantizing keeps llama.cpp's own blocks where they map exactly (Q4_0/Q4_1 -> 4-bit, Q8_0 -> 8-bit);
    other matrices go through ``mx.quantize`` (4 bits, 8 for the embedding). Norms stay float.
    """
    from tether.engine.mlx.runtime import preload_blas

    preload_blas()
    import mlx.core as mx

    mx_dtype = {"float32": mx.float32, "float16": mx.float16, "bfloat16": mx.bfloat16}[dtype]
    arrays: dict[str, Any] = {}
    quant: dict[str, Any] | None = (
        {"group_size": QUANT_GROUP_SIZE, "bits": 4, "mode": "affine"} if quantize else None
    )
    for name, weight in weights.items():
        w = weight.value
        if quant is None or w.ndim != 2 or w.shape[1] % QUANT_GROUP_SIZE or name.endswith("norm.weight"):
            arrays[name] = mx.array(w).astype(mx_dtype)
            continue
        prefix = name.removesuffix(".weight")
        if weight.blocks is not None:
            b = weight.blocks
            wq, scales, biases, bits = mx.array(b.packed()), mx.array(b.scales), mx.array(b.biases), b.bits
        else:
            bits = 8 if name == "model.embed_tokens.weight" else 4
            wq, scales, biases = mx.quantize(
                mx.array(w).astype(mx_dtype), group_size=QUANT_GROUP_SIZE, bits=bits
            )
        arrays[name], arrays[f"{prefix}.scales"], arrays[f"{prefix}.biases"] = (
            wq,
            scales.astype(mx_dtype),
            biases.astype(mx_dtype),
        )
        if bits != quant["bits"]:
            quant[prefix] = {"group_size": QUANT_GROUP_SIZE, "bits": bits, "mode": "affine"}
    mx.save_safetensors(str(out_dir / "model.safetensors"), arrays, metadata={"format": "mlx"})
    return quant


def gguf_to_mlx(gguf_path: Path, out_dir: Path, *, quantize: bool = False, dtype: str = "float32") -> Path:
    """Convert ``gguf_path`` into an MLX model directory at ``out_dir`` (created; files overwritten).

    ``dtype`` is the storage type of the dequantized weights (``float32``, ``float16``, ``bfloat16``);
    ``quantize`` writes MLX's quantized format instead (GGUF blocks repacked exactly where they map).
    """
    try:
        import gguf
    except ImportError as exc:
        raise ConfigError("the `gguf` package is needed to convert: pip install 'tether[mlx]'") from exc
    if dtype not in ("float32", "float16", "bfloat16"):
        raise ConfigError(f"dtype must be float32, float16 or bfloat16, not {dtype!r}")
    gguf_path, out_dir = Path(gguf_path), Path(out_dir)
    if not gguf_path.is_file():
        raise ConfigError(f"GGUF file not found: {gguf_path}")
    reader = gguf.GGUFReader(str(gguf_path))
    meta = read_gguf_metadata(reader)
    has_output = any(t.name == "output.weight" for t in reader.tensors)
    context = int(meta.get("llama.context_length", 4096))
    vocab = GgufVocab.from_metadata(meta, context_length=context)
    config = _model_config(meta, vocab, has_output, gguf_path)
    weights = _load_weights(reader, config)
    out_dir.mkdir(parents=True, exist_ok=True)
    quant = _save_weights(weights, out_dir, dtype, quantize)  # type: ignore[arg-type]
    config["torch_dtype"] = dtype
    config["tether"]["quantized"] = quantize
    if quant is not None:
        config["quantization"] = quant
        config["quantization_config"] = quant
    (out_dir / "config.json").write_text(json.dumps(config, indent=2), encoding="utf-8")
    generation = {"bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"]}
    (out_dir / "generation_config.json").write_text(json.dumps(generation, indent=2), encoding="utf-8")
    write_tokenizer_files(vocab, out_dir)
    return out_dir


def default_cache_dir() -> Path:
    """``$TETHER_MLX_CACHE``, else ``$XDG_CACHE_HOME/tether/mlx``, else ``~/.cache/tether/mlx``."""
    if explicit := os.environ.get("TETHER_MLX_CACHE"):
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "tether" / "mlx"


def _cache_key(gguf_path: Path, quantize: bool, dtype: str) -> str:
    stat = gguf_path.stat()
    ident = (
        f"{gguf_path.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|q={quantize}|{dtype}|v{CONVERTER_VERSION}"
    )
    return f"{gguf_path.stem.split('.')[0].lower()}-{hashlib.sha256(ident.encode()).hexdigest()[:16]}"


def cached_gguf_to_mlx(
    gguf_path: Path, *, quantize: bool = False, dtype: str = "float32", cache_dir: Path | None = None
) -> Path:
    """The MLX directory for ``gguf_path``, converting it on first use; the cache entry appears atomically."""
    gguf_path = Path(gguf_path)
    if not gguf_path.is_file():
        raise ConfigError(f"GGUF file not found: {gguf_path}")
    root = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    final = root / _cache_key(gguf_path, quantize, dtype)
    if (final / "config.json").is_file():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = root / f".{final.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        gguf_to_mlx(gguf_path, tmp, quantize=quantize, dtype=dtype)
        try:
            tmp.rename(final)
        except OSError:
            if not (final / "config.json").is_file():  # another process did not win the race: a real error
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m tether.engine.mlx.convert [GGUF] [OUT] [--quantize] [--dtype D]``; prints the directory."""
    from tether.engine.locate import bundled_model_path

    parser = argparse.ArgumentParser(prog="tether convert gguf-to-mlx", description=__doc__.splitlines()[0])
    parser.add_argument("gguf", nargs="?", type=Path, help="GGUF file (default: the bundled SmolLM2)")
    parser.add_argument("out", nargs="?", type=Path, help="output directory (default: the tether MLX cache)")
    parser.add_argument("--quantize", action="store_true", help="re-quantize with MLX (4-bit, group 32)")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float16", "bfloat16"])
    args = parser.parse_args(argv)
    try:
        src = args.gguf or bundled_model_path()
        if args.out is None:
            out = cached_gguf_to_mlx(src, quantize=args.quantize, dtype=args.dtype)
        else:
            out = gguf_to_mlx(src, args.out, quantize=args.quantize, dtype=args.dtype)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)  # noqa: T201
        return 2
    print(out)  # noqa: T201
    return 0


if __name__ == "__main__":  # pragma: no cover - manual entry point
    raise SystemExit(main())
