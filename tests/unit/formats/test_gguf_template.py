"""Reading the chat template from a GGUF header, and the ``tether formats`` CLI."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from tether.errors import FormatError
from tether.grammar.formats.cli import formats_app
from tether.grammar.formats.gguf_template import read_chat_template, read_metadata_value

QWEN_TEMPLATE = '{% if tools %}<tools>{% endif %}<tool_call>\n{"name": ...}\n</tool_call> ünï'


def _str(s: str) -> bytes:
    data = s.encode()
    return struct.pack("<Q", len(data)) + data


def _value(vtype: int, value: Any) -> bytes:
    scalars = {
        0: "<B",
        1: "<b",
        2: "<H",
        3: "<h",
        4: "<I",
        5: "<i",
        6: "<f",
        7: "<?",
        10: "<Q",
        11: "<q",
        12: "<d",
    }
    if vtype in scalars:
        return struct.pack(scalars[vtype], value)
    if vtype == 8:
        return _str(value)
    itype, items = value
    return struct.pack("<IQ", itype, len(items)) + b"".join(_value(itype, v) for v in items)


def write_gguf(
    path: Path, kvs: list[tuple[str, int, Any]], *, version: int = 3, magic: bytes = b"GGUF"
) -> Path:
    body = magic + struct.pack("<IQQ", version, 0, len(kvs))
    for key, vtype, value in kvs:
        body += _str(key) + struct.pack("<I", vtype) + _value(vtype, value)
    path.write_bytes(body)
    return path


KVS: list[tuple[str, int, Any]] = [
    ("general.architecture", 8, "llama"),
    ("general.alignment", 4, 32),
    ("llama.rope.freq_base", 6, 10000.0),
    ("general.flag", 7, True),
    ("general.big", 10, 2**40),
    ("general.neg", 11, -3),
    ("general.ratio", 12, 0.5),
    ("small.ints", 0, 7),
    ("small.i8", 1, -7),
    ("small.u16", 2, 700),
    ("small.i16", 3, -700),
    ("small.i32", 5, -70000),
    ("tokenizer.ggml.tokens", 9, (8, ["<s>", "</s>", "hello", "wörld"])),
    ("tokenizer.ggml.scores", 9, (6, [0.0, -1.0, -2.0, -3.0])),
    ("tokenizer.ggml.nested", 9, (9, [(4, [1, 2]), (4, [3])])),
    ("tokenizer.chat_template", 8, QWEN_TEMPLATE),
    ("after.template", 4, 1),
]


def test_reads_template_after_arrays(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "m.gguf", KVS)
    assert read_chat_template(path) == QWEN_TEMPLATE
    assert read_metadata_value(path, "tokenizer.ggml.tokens") == ["<s>", "</s>", "hello", "wörld"]
    assert read_metadata_value(path, "tokenizer.ggml.nested") == [[1, 2], [3]]
    assert read_metadata_value(path, "general.big") == 2**40
    assert read_metadata_value(path, "small.i16") == -700
    assert read_metadata_value(path, "general.flag") is True
    assert read_metadata_value(path, "after.template") == 1
    assert read_metadata_value(path, "no.such.key") is None


def test_version_2_and_no_template(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "v2.gguf", KVS[:3], version=2)
    assert read_chat_template(path) is None


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [({"magic": b"GGML"}, "not a GGUF file"), ({"version": 1}, "unsupported GGUF version 1")],
)
def test_bad_headers(tmp_path: Path, kwargs: dict[str, Any], message: str) -> None:
    path = write_gguf(tmp_path / "bad.gguf", KVS, **kwargs)
    with pytest.raises(FormatError, match=message):
        read_chat_template(path)


def test_unknown_value_type(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "bad.gguf", [("x", 4, 0)])
    data = bytearray(path.read_bytes())
    type_at = 4 + 4 + 8 + 8 + 8 + len("x")  # magic, version, counts, key length, key
    data[type_at : type_at + 4] = struct.pack("<I", 99)
    path.write_bytes(bytes(data))
    with pytest.raises(FormatError, match="unknown GGUF value type 99"):
        read_chat_template(path)


def test_truncated_and_missing_files(tmp_path: Path) -> None:
    path = write_gguf(tmp_path / "t.gguf", KVS)
    path.write_bytes(path.read_bytes()[:-40])
    with pytest.raises(FormatError, match="truncated"):
        read_chat_template(path)
    with pytest.raises(FormatError, match="cannot open"):
        read_chat_template(tmp_path / "absent.gguf")


def test_cli_list() -> None:
    result = CliRunner().invoke(formats_app, ["list"])
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert any(line.startswith("hermes ") for line in lines)
    assert any(line.startswith("generic ") for line in lines)


def test_cli_detect(tmp_path: Path) -> None:
    runner = CliRunner()
    qwen = write_gguf(tmp_path / "qwen.gguf", KVS)
    result = runner.invoke(formats_app, ["detect", str(qwen)])
    assert (result.exit_code, result.output.strip()) == (0, "hermes")
    result = runner.invoke(formats_app, ["detect", str(qwen), "--show-template"])
    assert QWEN_TEMPLATE in result.output
    bare = write_gguf(tmp_path / "bare.gguf", KVS[:2])
    result = runner.invoke(formats_app, ["detect", str(bare)])
    assert (result.exit_code, result.output.strip()) == (0, "generic (no chat template in the file)")
    result = runner.invoke(formats_app, ["detect", str(tmp_path / "missing.gguf")])
    assert result.exit_code == 1 and "cannot open" in result.output
