"""``POST /v1/embeddings`` over a real socket, on a fake embedder: OpenAI's request and response shapes,
its error shape for every refusal, the off switch, and ``--embedding-model`` in the settings.

The model itself is tested in tests/model/test_embeddings_model.py; here it is a deterministic stand-in.
"""

from __future__ import annotations

import base64
import hashlib
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import numpy.typing as npt
import openai
import pytest
from typer.testing import CliRunner

import tether.server
from tests.support.serve import isolated_serve
from tests.support.socket_server import serving
from tether.cli import app as cli_app
from tether.config import ServerConfig, Settings
from tether.engine.embedding import Embedder, EmbeddingInput, Embeddings
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.errors import ConfigError
from tether.proxy.app import create_app
from tether.proxy.embeddings_routes import MAX_INPUTS

DIM = 384


class FakeEmbedder:
    """Unit vectors from a hash of the input; 1 token per word plus [CLS] and [SEP], cut at 8."""

    model_id = "fake-minilm"
    names = ("fake-minilm", "Fake-MiniLM")
    dimensions = DIM
    max_tokens = 8

    def __init__(self) -> None:
        self.calls: list[list[EmbeddingInput]] = []
        self.threads: set[str] = set()
        self.closed = False

    @staticmethod
    def vector(item: EmbeddingInput) -> npt.NDArray[np.float32]:
        seed = int.from_bytes(hashlib.sha256(repr(item).encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(DIM).astype(np.float32)
        return v / np.linalg.norm(v)

    def _tokens(self, item: EmbeddingInput) -> int:
        return (len(item.split()) if isinstance(item, str) else len(item)) + 2

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float32]:
        return self.embed_inputs(list(texts)).vectors

    def embed_inputs(self, inputs: Sequence[EmbeddingInput]) -> Embeddings:
        self.calls.append(list(inputs))
        self.threads.add(threading.current_thread().name)
        counts = [self._tokens(item) for item in inputs]
        return Embeddings(
            np.stack([self.vector(item) for item in inputs]),
            tuple(min(n, self.max_tokens) for n in counts),
            tuple(n > self.max_tokens for n in counts),
        )

    def close(self) -> None:
        self.closed = True


def _conforms(embedder: Embedder) -> Embedder:
    return embedder  # mypy checks FakeEmbedder against the Protocol here


@pytest.fixture
def fake() -> FakeEmbedder:
    return FakeEmbedder()


@pytest.fixture
def base(fake: FakeEmbedder) -> Iterator[str]:
    app = create_app(ServerConfig(), Scheduler([ScriptedEngine()]), embedder=_conforms(fake))
    with serving(app) as url:
        yield url


def post(base: str, body: dict[str, Any] | str) -> httpx.Response:
    """``body`` as JSON, or a string sent as it is (JSON that Python cannot encode, such as a lone surrogate)."""
    if isinstance(body, str):
        headers = {"content-type": "application/json"}
        return httpx.post(f"{base}/v1/embeddings", content=body, headers=headers, timeout=10)
    return httpx.post(f"{base}/v1/embeddings", json=body, timeout=10)


def error_of(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, r.text
    err: dict[str, Any] = r.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    return err


# -- what a client gets ------------------------------------------------------------------------


def test_one_string_in_openai_shape(base: str, fake: FakeEmbedder) -> None:
    r = post(base, {"model": "fake-minilm", "input": "hello there world"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["object"] == "list" and body["model"] == "fake-minilm"
    assert body["usage"] == {"prompt_tokens": 5, "total_tokens": 5}
    [item] = body["data"]
    assert item["object"] == "embedding" and item["index"] == 0
    assert np.allclose(item["embedding"], fake.vector("hello there world"), atol=1e-7)
    assert "tether" not in body  # nothing was truncated
    assert fake.threads and "MainThread" not in fake.threads  # off the event loop


def test_lists_of_strings_and_of_token_ids_keep_their_order(base: str, fake: FakeEmbedder) -> None:
    body = post(base, {"model": "Fake-MiniLM", "input": ["a b", "c"], "user": "ignored"}).json()
    assert [d["index"] for d in body["data"]] == [0, 1]
    assert np.allclose(body["data"][1]["embedding"], fake.vector("c"), atol=1e-7)
    assert body["usage"]["prompt_tokens"] == 4 + 3
    post(base, {"model": "fake-minilm", "input": [7, 8, 9]})
    post(base, {"model": "fake-minilm", "input": [[7, 8], [9]]})
    assert fake.calls[-2:] == [[[7, 8, 9]], [[7, 8], [9]]]  # one token list is one input


def test_base64_is_little_endian_float32(base: str, fake: FakeEmbedder) -> None:
    body = post(base, {"model": "fake-minilm", "input": ["x y"], "encoding_format": "base64"}).json()
    raw = base64.b64decode(body["data"][0]["embedding"])
    assert np.array_equal(np.frombuffer(raw, dtype="<f4"), fake.vector("x y"))


def test_truncated_inputs_are_counted_at_the_limit_and_named(base: str) -> None:
    body = post(base, {"model": "fake-minilm", "input": ["short", "w " * 50]}).json()
    assert body["usage"]["prompt_tokens"] == 3 + 8
    assert body["tether"] == {"truncated": [1], "max_tokens": 8}


def test_dimensions_equal_to_the_models_are_accepted(base: str) -> None:
    assert post(base, {"model": "fake-minilm", "input": "x", "dimensions": DIM}).status_code == 200


def test_openai_sdk_float_and_base64(base: str, fake: FakeEmbedder) -> None:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0)
    floats = client.embeddings.create(model="fake-minilm", input=["a", "b"], encoding_format="float")
    assert [d.index for d in floats.data] == [0, 1]
    assert np.allclose(floats.data[0].embedding, fake.vector("a"), atol=1e-7)
    default = client.embeddings.create(model="fake-minilm", input="a")  # the SDK asks for base64
    assert np.allclose(default.data[0].embedding, fake.vector("a"), atol=1e-7)
    assert default.usage.prompt_tokens == 3
    with pytest.raises(openai.BadRequestError) as caught:
        client.embeddings.create(model="fake-minilm", input="a", dimensions=256)
    assert caught.value.code == "invalid_request"


def test_models_lists_the_embedding_model_after_the_chat_model(base: str) -> None:
    cards = httpx.get(f"{base}/v1/models", timeout=10).json()["data"]
    assert cards[0]["id"] == "scripted"
    assert cards[-1]["id"] == "fake-minilm"
    assert cards[-1]["tether"] == {"kind": "embedding", "dimensions": DIM, "max_tokens": 8}


# -- refusals, each in OpenAI's error shape -----------------------------------------------------


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"model": "fake-minilm", "input": ""}, "input"),
        ({"model": "fake-minilm", "input": []}, "input"),
        ({"model": "fake-minilm", "input": ["a", ""]}, "input"),
        ({"model": "fake-minilm", "input": [[1], []]}, "input"),
        ({"model": "fake-minilm", "input": ["a", 1]}, "input"),
        ({"model": "fake-minilm", "input": [-1]}, "input"),
        ({"model": "fake-minilm", "input": [True]}, "input"),
        ({"model": "fake-minilm", "input": {"text": "a"}}, "input"),
        ({"model": "fake-minilm"}, "input"),
        ({"input": "a"}, "model"),
        ({"model": "fake-minilm", "input": "a", "encoding_format": "int8"}, "encoding_format"),
        ({"model": "fake-minilm", "input": "a", "dimensions": 256}, "dimensions"),
        ('{"model": "fake-minilm", "input": ["ok", "\\ud800"]}', None),
    ],
)
def test_bad_requests_are_400_naming_the_field(
    base: str, fake: FakeEmbedder, body: dict[str, Any] | str, param: str | None
) -> None:
    err = error_of(post(base, body), 400)
    assert err["type"] == "invalid_request_error"
    if param is not None:
        assert err["param"] == param, err
    if isinstance(body, dict) and body.get("dimensions") == 256:
        assert "dimensions" in err["message"] and "384" in err["message"]
    assert fake.calls == []


def test_too_many_inputs(base: str) -> None:
    err = error_of(post(base, {"model": "fake-minilm", "input": ["a"] * (MAX_INPUTS + 1)}), 400)
    assert str(MAX_INPUTS) in err["message"]


def test_another_model_is_not_found(base: str) -> None:
    err = error_of(post(base, {"model": "text-embedding-3-small", "input": "a"}), 404)
    assert err["code"] == "model_not_found" and "fake-minilm" in err["message"]
    err = error_of(post(base, {"model": "scripted", "input": "a"}), 404)  # the chat model embeds nothing
    assert err["code"] == "model_not_found"


def test_without_an_embedder_the_route_says_how_to_get_one() -> None:
    app = create_app(ServerConfig(), Scheduler([ScriptedEngine()]))
    with serving(app) as url:
        err = error_of(post(url, {"model": "all-minilm-l6-v2", "input": "a"}), 404)
        assert err["code"] == "model_not_found" and "--embedding-model" in err["message"]
        assert [c["id"] for c in httpx.get(f"{url}/v1/models", timeout=10).json()["data"]] == ["scripted"]


def test_the_embedder_is_closed_with_the_app(fake: FakeEmbedder) -> None:
    app = create_app(ServerConfig(), Scheduler([ScriptedEngine()]), embedder=fake)
    with serving(app, lifespan="on") as url:
        assert post(url, {"model": "fake-minilm", "input": "a"}).status_code == 200
    assert fake.closed


# -- --embedding-model ----------------------------------------------------------------------------


def test_settings_default_is_auto_and_off_turns_it_off() -> None:
    assert Settings().to_config().embedding_model == "auto"
    assert Settings(embedding_model="off").to_config().embedding_model is None
    assert Settings(embedding_model="OFF").to_config().embedding_model is None
    assert Settings(embedding_model="/m/e.gguf").to_config().embedding_model == "/m/e.gguf"
    assert ServerConfig().embedding_model is None  # built in code (tests, evals): no embedder


def test_serve_flag_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = isolated_serve(tmp_path, monkeypatch)
    assert CliRunner().invoke(cli_app, ["serve", "--embedding-model", "off"]).exit_code == 0
    monkeypatch.setenv("TETHER_EMBEDDING_MODEL", "/models/e.gguf")
    assert CliRunner().invoke(cli_app, ["serve"]).exit_code == 0
    assert [c.embedding_model for c in seen] == [None, "/models/e.gguf"]


def test_load_embedder_off_auto_missing_and_a_bad_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert tether.server.load_embedder(ServerConfig()) is None

    def missing() -> Path:
        raise ConfigError("not converted: run scripts/setup.sh")

    monkeypatch.setattr(tether.server, "bundled_embedding_model_path", missing)
    assert tether.server.load_embedder(ServerConfig(embedding_model="auto")) is None
    with pytest.raises(ConfigError, match="not found"):
        tether.server.load_embedder(ServerConfig(embedding_model=str(tmp_path / "none.gguf")))
