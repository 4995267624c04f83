"""A BERT sentence embedding in plain numpy, from the HF weights: the reference llama.cpp's vectors are
checked against. Also the helpers to write a small synthetic BERT checkpoint (safetensors + tokenizer).

Test code only: tether itself never runs BERT in numpy.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = ["bert_sentence_embedding", "tiny_bert_checkpoint", "write_safetensors"]

Array = npt.NDArray[Any]


def _erf(x: Array) -> Array:
    """Abramowitz & Stegun 7.1.26 (|error| < 1.5e-7): the exact GELU HF BERT uses, vectorized."""
    sign = np.sign(x)
    a = np.abs(x)
    t = 1.0 / (1.0 + 0.3275911 * a)
    poly = t * (0.254829592 + t * (-0.284496736 + t * (1.421413741 + t * (-1.453152027 + t * 1.061405429))))
    return np.asarray(sign * (1.0 - poly * np.exp(-a * a)))


def _layer_norm(x: Array, w: Array, b: Array, eps: float) -> Array:
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return np.asarray((x - mean) / np.sqrt(var + eps) * w + b)


def bert_sentence_embedding(
    tensors: Mapping[str, Array], config: Mapping[str, Any], ids: Sequence[int]
) -> npt.NDArray[np.float32]:
    """Mean-pooled, L2-normalized last hidden state of ``ids`` (one unpadded sequence, token type 0),
    computed in float64 from HF ``BertModel`` weights."""
    w = {k.removeprefix("bert."): np.asarray(v, dtype=np.float64) for k, v in tensors.items()}
    eps = float(config.get("layer_norm_eps", 1e-12))
    heads = int(config["num_attention_heads"])
    n = len(ids)
    x = (
        w["embeddings.word_embeddings.weight"][list(ids)]
        + w["embeddings.position_embeddings.weight"][:n]
        + w["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, w["embeddings.LayerNorm.weight"], w["embeddings.LayerNorm.bias"], eps)
    for layer in range(int(config["num_hidden_layers"])):
        p = f"encoder.layer.{layer}."

        def linear(h: Array, name: str, p: str = p) -> Array:
            return np.asarray(h @ w[p + name + ".weight"].T + w[p + name + ".bias"])

        q, k, v = (
            linear(x, f"attention.self.{part}").reshape(n, heads, -1).transpose(1, 0, 2)
            for part in ("query", "key", "value")
        )
        scores = q @ k.transpose(0, 2, 1) / math.sqrt(q.shape[-1])
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        scores /= scores.sum(-1, keepdims=True)
        context = (scores @ v).transpose(1, 0, 2).reshape(n, -1)
        x = _layer_norm(
            x + linear(context, "attention.output.dense"),
            w[p + "attention.output.LayerNorm.weight"],
            w[p + "attention.output.LayerNorm.bias"],
            eps,
        )
        h = linear(x, "intermediate.dense")
        h = 0.5 * h * (1.0 + _erf(h / math.sqrt(2.0)))
        x = _layer_norm(
            x + linear(h, "output.dense"),
            w[p + "output.LayerNorm.weight"],
            w[p + "output.LayerNorm.bias"],
            eps,
        )
    pooled = x.mean(0)
    out: npt.NDArray[np.float32] = (pooled / np.linalg.norm(pooled)).astype(np.float32)
    return out


def write_safetensors(path: Path, tensors: Mapping[str, Array]) -> None:
    """A ``.safetensors`` file (F32/F16/I64 arrays), written by hand from the format's definition."""
    names = {np.dtype("<f4"): "F32", np.dtype("<f2"): "F16", np.dtype("<i8"): "I64"}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name, array in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {
            "dtype": names[np.dtype(array.dtype).newbyteorder("<")],
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


TINY_VOCAB = [
    "[PAD]", "[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
    "hello", "world", "tool", "call", "weather", "##s", "##ing", "the", "a", "?", ",", "riga", "in", "city",
]  # fmt: skip


def tiny_bert_checkpoint(
    folder: Path, *, hidden: int = 16, layers: int = 2, heads: int = 2, seed: int = 0
) -> Path:
    """A random BERT sentence-transformers checkpoint small enough to convert and run in a unit test."""
    rng = np.random.default_rng(seed)
    ff, positions = 4 * hidden, 32
    folder.mkdir(parents=True, exist_ok=True)

    def rand(*shape: int, scale: float = 0.2) -> Array:
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    tensors: dict[str, Array] = {
        "embeddings.position_ids": np.arange(positions, dtype=np.int64)[None, :],
        "embeddings.word_embeddings.weight": rand(len(TINY_VOCAB), hidden),
        "embeddings.position_embeddings.weight": rand(positions, hidden),
        "embeddings.token_type_embeddings.weight": rand(2, hidden),
        "embeddings.LayerNorm.weight": 1 + rand(hidden, scale=0.05),
        "embeddings.LayerNorm.bias": rand(hidden, scale=0.05),
        "pooler.dense.weight": rand(hidden, hidden),
        "pooler.dense.bias": rand(hidden),
    }
    for i in range(layers):
        p = f"encoder.layer.{i}."
        for name, (rows, cols) in {
            "attention.self.query": (hidden, hidden),
            "attention.self.key": (hidden, hidden),
            "attention.self.value": (hidden, hidden),
            "attention.output.dense": (hidden, hidden),
            "intermediate.dense": (ff, hidden),
            "output.dense": (hidden, ff),
        }.items():
            tensors[p + name + ".weight"] = rand(rows, cols)
            tensors[p + name + ".bias"] = rand(rows, scale=0.05)
        for norm in ("attention.output.LayerNorm", "output.LayerNorm"):
            tensors[p + norm + ".weight"] = 1 + rand(hidden, scale=0.05)
            tensors[p + norm + ".bias"] = rand(hidden, scale=0.05)
    write_safetensors(folder / "model.safetensors", tensors)
    config = {
        "architectures": ["BertModel"],
        "model_type": "bert",
        "hidden_act": "gelu",
        "hidden_size": hidden,
        "intermediate_size": ff,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "max_position_embeddings": positions,
        "type_vocab_size": 2,
        "vocab_size": len(TINY_VOCAB),
        "layer_norm_eps": 1e-12,
        "position_embedding_type": "absolute",
    }
    (folder / "config.json").write_text(json.dumps(config))
    special = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"}
    tokenizer = {
        "added_tokens": [
            {"id": i, "content": t, "special": True} for i, t in enumerate(TINY_VOCAB) if t in special
        ],
        "normalizer": {"type": "BertNormalizer", "lowercase": True, "strip_accents": None},
        "model": {
            "type": "WordPiece",
            "unk_token": "[UNK]",
            "continuing_subword_prefix": "##",
            "vocab": {t: i for i, t in enumerate(TINY_VOCAB)},
        },
    }
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer))
    (folder / "tokenizer_config.json").write_text(json.dumps({"do_lower_case": True, "cls_token": "[CLS]"}))
    modules = [
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
    ]
    (folder / "modules.json").write_text(json.dumps(modules))
    (folder / "1_Pooling").mkdir(exist_ok=True)
    (folder / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": hidden, "pooling_mode_mean_tokens": True})
    )
    return folder
