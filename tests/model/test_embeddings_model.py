"""The bundled all-MiniLM-L6-v2, converted to GGUF and run by llama.cpp: the same vectors as a numpy
forward pass of the original safetensors, sensible neighbours, and ``/v1/embeddings`` through the
openai SDK over a real socket.
"""

from __future__ import annotations

import base64
import os
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest

from tests.support.bert_reference import bert_sentence_embedding
from tests.support.socket_server import serving
from tether.config import ServerConfig
from tether.engine.embedding import LlamaEmbedder
from tether.engine.embedding.checkpoint import BertCheckpoint, read_checkpoint
from tether.engine.embedding.convert import convert_bundled
from tether.engine.locate import bundled_embedding_source
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.proxy.app import create_app

SENTENCES = [
    "What's the weather like in Riga?",
    "get_weather: current weather for a city",
    "convert_currency: convert an amount between currencies",
    "Naïve café owners résumé: the quick brown fox jumps over the lazy dog!",
]


@pytest.fixture(scope="module")
def checkpoint() -> BertCheckpoint:
    return read_checkpoint(bundled_embedding_source()[0])


@pytest.fixture(scope="module")
def embedder(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaEmbedder]:
    path, written = convert_bundled(tmp_path_factory.mktemp("embedding") / "all-minilm-l6-v2.gguf")
    assert written
    threads = int(os.environ.get("TETHER_TEST_THREADS", "0")) or None
    model = LlamaEmbedder(path, n_threads=threads)
    yield model
    model.close()


def reference_weights(checkpoint: BertCheckpoint) -> dict[str, Any]:
    """The original weights, through the safetensors package where it is installed (an independent reader)."""
    try:
        from safetensors.numpy import load
    except ImportError:
        return checkpoint.tensors
    with zipfile.ZipFile(bundled_embedding_source()[0]) as z:
        name = next(n for n in z.namelist() if n.endswith("model.safetensors"))
        return dict(load(z.read(name)))


def test_vectors_match_a_numpy_forward_pass(embedder: LlamaEmbedder, checkpoint: BertCheckpoint) -> None:
    weights = reference_weights(checkpoint)
    vectors = embedder.embed(SENTENCES)
    assert vectors.shape == (len(SENTENCES), 384) and vectors.dtype == np.float32
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1, atol=1e-5)
    cosines = [
        float(vector @ bert_sentence_embedding(weights, checkpoint.config, embedder.tokenize(text)))
        for text, vector in zip(SENTENCES, vectors, strict=True)
    ]
    assert min(cosines) > 0.99, cosines


def test_tokens_match_the_original_tokenizer(embedder: LlamaEmbedder) -> None:
    tokenizers = pytest.importorskip("tokenizers")
    with zipfile.ZipFile(bundled_embedding_source()[0]) as z:
        name = next(n for n in z.namelist() if n.endswith("tokenizer.json"))
        hf = tokenizers.Tokenizer.from_str(z.read(name).decode())
    hf.no_truncation()
    hf.no_padding()
    for text in [*SENTENCES, "UPPER lower MiXeD 123.45 e-mail@example.com ¿Qué? 東京 tab\tnew\nline"]:
        assert embedder.tokenize(text) == hf.encode(text).ids, text


def test_nearest_tool_is_the_one_meant(embedder: LlamaEmbedder) -> None:
    tools = [
        "get_weather: current weather for a city",
        "convert_currency: convert an amount between currencies",
        "send_email: send an email to a recipient",
    ]
    tool_vectors = embedder.embed(tools)
    for query, meant in [
        ("What's the weather like in Riga?", 0),
        ("How much is 75 euros in British pounds?", 1),
        ("Write to alice@example.com that I'll be late", 2),
    ]:
        scores = tool_vectors @ embedder.embed([query])[0]
        assert int(np.argmax(scores)) == meant, (query, scores)


def test_batches_cache_and_truncation(embedder: LlamaEmbedder) -> None:
    alone = embedder.embed(["convert_currency: convert an amount between currencies"])[0]
    many = embedder.embed([f"tool number {i}" for i in range(40)] + [SENTENCES[2]])
    assert float(alone @ many[-1]) > 0.9999  # packing sequences into one decode changes nothing
    before = embedder.cache_info()["hits"]
    embedder.embed([SENTENCES[2]])
    assert embedder.cache_info()["hits"] == before + 1
    cut = embedder.embed_inputs(["word " * 600, "word"])
    assert cut.tokens == (512, 3) and cut.truncated == (True, False)
    ids = embedder.tokenize(SENTENCES[0])
    as_ids = embedder.embed_inputs([ids[1:-1]]).vectors[0]
    assert float(as_ids @ embedder.embed([SENTENCES[0]])[0]) > 0.9999


def test_openai_sdk_over_a_socket(embedder: LlamaEmbedder) -> None:
    app = create_app(ServerConfig(), Scheduler([ScriptedEngine()]), embedder=embedder)
    expected = embedder.embed(SENTENCES[:2])
    with serving(app) as url:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)
        # float; base64 asked for (the SDK hands the text back); unset (the SDK asks for base64, decodes it)
        for encoding in ("float", "base64", None):
            extra: dict[str, Any] = {} if encoding is None else {"encoding_format": encoding}
            reply = client.embeddings.create(model="all-minilm-l6-v2", input=SENTENCES[:2], **extra)
            assert reply.model == "all-minilm-l6-v2"
            assert [d.index for d in reply.data] == [0, 1]
            rows = [
                np.frombuffer(base64.b64decode(str(d.embedding)), dtype="<f4")
                if encoding == "base64"
                else d.embedding
                for d in reply.data
            ]
            got = np.array(rows, dtype=np.float32)
            assert got.shape == (2, 384)
            assert np.allclose(got, expected, atol=1e-6), encoding
            assert reply.usage.prompt_tokens == reply.usage.total_tokens == 11 + 11
        listed = [m.id for m in client.models.list().data]
        assert listed[-1] == "all-minilm-l6-v2"


def test_the_converted_file_is_where_the_locator_looks(tmp_path: Path) -> None:
    """``bundled_embedding_model_path`` finds what setup wrote, or names the command that writes it."""
    from tether.engine.locate import bundled_embedding_model_path, embedding_model_cache_path
    from tether.errors import ConfigError

    try:
        found = bundled_embedding_model_path()
    except ConfigError as exc:
        assert "scripts/setup.sh" in exc.message
        return
    assert found == embedding_model_cache_path() and found.stat().st_size > 40_000_000


@pytest.mark.parametrize(("backend", "threads"), [(None, 1), ("http://127.0.0.1:9/v1", 2)])
def test_the_server_embedder_takes_one_thread_beside_an_in_process_engine(
    embedder: LlamaEmbedder, backend: str | None, threads: int
) -> None:
    # Two multi-threaded llama.cpp contexts in one process slow each other's decode ~4x (libgomp's
    # throttled spin-wait; benchmarks/bench_engine.py --embedder-threads): beside an in-process engine
    # the embedder runs on one thread; in front of a remote backend it has the cores.
    from tether.server import load_embedder

    config = ServerConfig(embedding_model=str(embedder.path), n_threads=2, backend=backend)
    loaded = load_embedder(config)
    assert loaded is not None
    try:
        assert isinstance(loaded, LlamaEmbedder)
        assert loaded.threads == threads
        assert loaded.embed(["hello"]).shape == (1, 384)
    finally:
        loaded.close()
