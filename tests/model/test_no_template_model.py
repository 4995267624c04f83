"""A GGUF without a chat template: tether's ChatML fallback, and its markers as stop strings.

The GGUFs are made here from the bundled model with the ``gguf`` package: every key and tensor copied,
``tokenizer.chat_template`` left out. In one the vocabulary keeps ``<|im_end|>`` as the model's own
end token, so the fallback needs nothing more; in the other the model's turn tokens are renamed, as in
a model that never saw ChatML: the fallback's ``<|im_end|>`` is then plain text to it, which the
model writes after its answer and then runs on past. There every generation stops at the marker, and
the reply never holds it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from pathlib import Path

import gguf
import pytest

from tether.engine.base import Done, SamplingParams, Token
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.locate import bundled_model_path
from tether.engine.template import FALLBACK_TURN_END, FALLBACK_TURN_OPEN, ChatTemplate

QUESTION = [{"role": "user", "content": "What is the capital of France?"}]
# Names llama.cpp does not take for end-of-turn tokens (it does for ``<|im_end|>``, whatever its type).
RENAMED = {FALLBACK_TURN_OPEN: "<|turn_open|>", FALLBACK_TURN_END: "<|turn_close|>"}


def without_template(dst: Path, rename: Mapping[str, str] | None = None) -> Path:
    """A copy of the bundled GGUF without ``tokenizer.chat_template`` (tokens renamed per ``rename``)."""
    reader = gguf.GGUFReader(str(bundled_model_path()))
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    assert arch is not None
    writer = gguf.GGUFWriter(str(dst), str(arch.contents()))
    for field in reader.fields.values():
        if field.name == gguf.Keys.General.ARCHITECTURE or field.name.startswith("GGUF."):
            continue  # the writer writes these itself
        if field.name == gguf.Keys.Tokenizer.CHAT_TEMPLATE:
            continue
        kind = field.types[0]
        sub = field.types[-1] if kind == gguf.GGUFValueType.ARRAY else None
        value = field.contents()
        if field.name == gguf.Keys.Tokenizer.LIST and rename:
            value = [rename.get(t, t) for t in value]
        writer.add_key_value(field.name, value, kind, sub_type=sub)
    for tensor in reader.tensors:
        writer.add_tensor_info(
            tensor.name, tensor.data.shape, tensor.data.dtype, tensor.data.nbytes, tensor.tensor_type
        )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    for tensor in reader.tensors:
        writer.write_tensor_data(tensor.data, tensor_endianess=reader.endianess)
    writer.close()
    return dst


def load(path: Path) -> LlamaCppEngine:
    threads = int(os.environ.get("TETHER_TEST_THREADS", "0")) or None
    return LlamaCppEngine(path, n_ctx=512, n_threads=threads)


@pytest.fixture(scope="module")
def plain_chatml(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaCppEngine]:
    """No template; ``<|im_end|>`` is still the model's own end token."""
    engine = load(without_template(tmp_path_factory.mktemp("gguf") / "no-template.gguf"))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def foreign_chatml(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LlamaCppEngine]:
    """No template, and the fallback's markers are plain text to the model."""
    dst = tmp_path_factory.mktemp("gguf") / "no-template-renamed.gguf"
    engine = load(without_template(dst, RENAMED))
    yield engine
    engine.close()


def reply(engine: LlamaCppEngine, max_tokens: int = 40) -> tuple[str, Done]:
    template = ChatTemplate(engine.info.chat_template)
    ids = engine.tokenize(template.render(QUESTION), special=True)
    text, done = "", None
    for ev in engine.generate(ids, SamplingParams(max_tokens=max_tokens, temperature=0.0)):
        if isinstance(ev, Token):
            text += ev.text
        else:
            done = ev
    assert done is not None
    return text, done


def test_a_fallback_marker_that_is_the_models_end_token_needs_no_stop(plain_chatml: LlamaCppEngine) -> None:
    assert plain_chatml.info.chat_template is None
    assert plain_chatml.model_stops == ()
    text, done = reply(plain_chatml)
    assert done.finish_reason == "stop"
    assert text.strip() and FALLBACK_TURN_END not in text


def test_a_reply_stops_at_a_plain_text_marker_instead_of_running_on(
    foreign_chatml: LlamaCppEngine, monkeypatch: pytest.MonkeyPatch
) -> None:
    engine = foreign_chatml
    assert engine.info.chat_template is None
    marker = engine.tokenize(FALLBACK_TURN_END, special=True)
    assert len(marker) > 1  # plain text to this model
    assert engine.model_stops == (FALLBACK_TURN_END, FALLBACK_TURN_OPEN)

    text, done = reply(engine)
    assert text.strip(), text
    assert FALLBACK_TURN_END not in text and FALLBACK_TURN_OPEN not in text, text
    assert done.finish_reason == "stop"
    # The model wrote the marker (its tokens are counted) and the generation ended right there.
    assert done.completion_tokens >= len(engine.tokenize(text, special=True)) + len(marker) - 1

    # Without the stops, the same greedy reply writes the marker and goes on past it.
    monkeypatch.setattr(engine, "_model_stops", ())
    loose, _ = reply(engine)
    assert loose.startswith(text + FALLBACK_TURN_END), loose
    assert loose[len(text) + len(FALLBACK_TURN_END) :].strip(), loose
