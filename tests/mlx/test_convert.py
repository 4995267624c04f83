"""The GGUF -> MLX converter: layout, config, tokenizer parity with llama.cpp, re-quantization."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pytest

from tests.mlx._util import step_logits
from tether.engine.base import Engine
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.mlx import is_mlx_model_dir
from tether.engine.mlx.convert import _unpermute, cached_gguf_to_mlx, gguf_to_mlx, main, read_gguf_metadata

if TYPE_CHECKING:
    from tether.engine.mlx import MlxEngine

# Strings that exercise the pre-tokenizer: digits (split one by one for "smollm"), whitespace runs,
# contractions, punctuation runs, non-Latin scripts, emoji, code, JSON and the chat markers.
SAMPLES = [
    "Hello world",
    " leading space and trailing  ",
    "Numbers: 1234567890, 3.14159, -42, 1e-9 and 2024-06-01T12:00:00Z",
    "I'm sure they'll say it's fine, we've seen it, you'd agree, I'd've",
    "Tabs\tand\nnewlines\r\n\n\n   indented\n\t\tmore",
    "Ünïcödé façade naïve résumé — “quotes” … ellipsis",
    "日本語のテキストと中文文本，还有한국어 텍스트.",
    "Emoji: 🤖🚀👍🏽 and 🇫🇷 flags",
    'def f(x):\n    return {"a": [1, 2, 3], "b": None}  # comment\n',
    '{"tool_calls": [{"name": "read_file", "arguments": {"path": "src/main.py"}}]}',
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|><|im_start|>text right after<|im_end|>x<|endoftext|>",
    "!!!???...,,,;;;:::---___===+++***&&&%%%$$$###@@@",
    "    ",
    "a" * 300,
    "x=1;y=22;z=333;w=4444",
    "ＦＵＬＬＷＩＤＴＨ ２０２４ and Ⅻ roman ½ fractions ²³",
]


def test_unpermute_inverts_llama_cpp_permutation() -> None:
    rng = np.random.default_rng(0)
    for n_head, head_dim, cols in ((9, 64, 576), (3, 64, 576), (4, 8, 16)):
        hf = rng.standard_normal((n_head * head_dim, cols)).astype(np.float32)
        # convert_hf_to_gguf.py's permute, which GGUF files carry for q/k.
        gguf = hf.reshape(n_head, 2, head_dim // 2, cols).swapaxes(1, 2).reshape(hf.shape)
        assert not np.array_equal(gguf, hf)
        np.testing.assert_array_equal(_unpermute(gguf, n_head), hf)


def test_config_follows_gguf_metadata(mlx_dir: Path, gguf_path: Path) -> None:
    import gguf

    meta = read_gguf_metadata(gguf.GGUFReader(str(gguf_path)))
    config = json.loads((mlx_dir / "config.json").read_text())
    assert is_mlx_model_dir(mlx_dir)
    assert config["model_type"] == "llama"
    assert config["hidden_size"] == meta["llama.embedding_length"] == 576
    assert config["num_hidden_layers"] == meta["llama.block_count"] == 30
    assert config["num_attention_heads"] == 9 and config["num_key_value_heads"] == 3
    assert config["intermediate_size"] == meta["llama.feed_forward_length"]
    assert config["rope_theta"] == pytest.approx(meta["llama.rope.freq_base"])
    assert config["rms_norm_eps"] == pytest.approx(meta["llama.attention.layer_norm_rms_epsilon"])
    assert config["vocab_size"] == 49152
    assert config["tie_word_embeddings"] is True  # SmolLM2 has no output.weight
    assert config["tether"]["model_id"] == "smollm2-135m-instruct"
    tok_config = json.loads((mlx_dir / "tokenizer_config.json").read_text())
    assert tok_config["chat_template"] == meta["tokenizer.chat_template"]
    assert tok_config["bos_token"] == "<|im_start|>" and tok_config["eos_token"] == "<|im_end|>"


def test_cache_is_reused(mlx_dir: Path, gguf_path: Path) -> None:
    before = (mlx_dir / "model.safetensors").stat().st_mtime_ns
    assert cached_gguf_to_mlx(gguf_path, cache_dir=mlx_dir.parent) == mlx_dir
    assert (mlx_dir / "model.safetensors").stat().st_mtime_ns == before
    assert not list(mlx_dir.parent.glob(f".{mlx_dir.name}.tmp-*"))


@pytest.mark.parametrize("special", [True, False])
def test_tokenization_matches_llama_cpp(
    mlx_engine: MlxEngine, llama_engine: LlamaCppEngine, special: bool
) -> None:
    for text in SAMPLES:
        assert mlx_engine.tokenize(text, special=special) == llama_engine.tokenize(text, special=special), (
            text
        )


def test_vocabulary_facts_match_llama_cpp(mlx_engine: MlxEngine, llama_engine: LlamaCppEngine) -> None:
    assert isinstance(mlx_engine, Engine)
    mi, li = mlx_engine.info, llama_engine.info
    assert mi.n_vocab == li.n_vocab
    assert mi.eos_token_ids == li.eos_token_ids == frozenset({0, 2, 4})
    assert mi.control_token_ids == li.control_token_ids
    assert (mi.bos_token, mi.eos_token, mi.chat_template) == (li.bos_token, li.eos_token, li.chat_template)
    assert mi.model_id == li.model_id
    assert mlx_engine.token_pieces() == llama_engine.token_pieces()
    for text in SAMPLES:
        ids = llama_engine.tokenize(text)
        assert mlx_engine.detokenize(ids) == llama_engine.detokenize(ids)


def test_quantized_conversion_repacks_gguf_blocks_exactly(
    gguf_path: Path, tmp_path: Path, mlx_engine: MlxEngine
) -> None:
    """Q4_1 blocks (scale + min) and Q8_0 blocks (scale) are MLX 4/8-bit groups of 32: no re-rounding."""
    import gguf
    import mlx.core as mx
    from gguf.quants import dequantize

    from tether.engine.mlx import MlxEngine

    out = gguf_to_mlx(gguf_path, tmp_path / "q4", quantize=True)
    config = json.loads((out / "config.json").read_text())
    assert config["quantization"]["bits"] == 4 and config["quantization"]["group_size"] == 32
    assert config["quantization"]["model.embed_tokens"]["bits"] == 8
    weights = mx.load(str(out / "model.safetensors"))
    tensors = {t.name: t for t in gguf.GGUFReader(str(gguf_path)).tensors}
    cases = [
        ("blk.3.ffn_up.weight", "model.layers.3.mlp.up_proj", 4, "Q4_1", 1),
        ("blk.7.attn_k.weight", "model.layers.7.self_attn.k_proj", 4, "Q4_1", 3),
        ("token_embd.weight", "model.embed_tokens", 8, "Q8_0", 1),
    ]
    for gguf_name, prefix, bits, kind, n_head in cases:
        tensor = tensors[gguf_name]
        assert tensor.tensor_type.name == kind
        reference = np.asarray(dequantize(tensor.data, tensor.tensor_type), dtype=np.float32)
        if n_head > 1:
            reference = _unpermute(reference, n_head)
        parts = (weights[f"{prefix}.weight"], weights[f"{prefix}.scales"], weights[f"{prefix}.biases"])
        back = np.asarray(mx.dequantize(*parts, group_size=32, bits=bits))
        np.testing.assert_allclose(back, reference, rtol=0, atol=1e-6 * float(np.abs(reference).max()))
    # The quantized directory serves: same vocabulary, logits close to the float32 model's.
    engine = MlxEngine(out, n_ctx=512)
    assert engine.info.eos_token_ids == mlx_engine.info.eos_token_ids
    ids = engine.tokenize("<|im_start|>user\nName a colour.<|im_end|>\n<|im_start|>assistant\n")
    (q4,), (f32,) = step_logits(engine, ids), step_logits(mlx_engine, ids)
    assert np.corrcoef(q4, f32)[0, 1] > 0.99


def test_cli_reports_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([str(tmp_path / "missing.gguf"), str(tmp_path / "out")]) == 2
    assert "GGUF file not found" in capsys.readouterr().err
