"""llama.cpp load options: the one mapping to ``Llama(...)`` kwargs, its checks, and the MLX refusals."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import get_args

import pytest

from tether.config import ServerConfig
from tether.engine.llama_options import (
    CACHE_TYPES,
    CacheTypeName,
    LlamaOptions,
    attention,
    check_mlx,
    llama_kwargs,
    offloaded_layers,
    parse_gpu_layers,
)
from tether.errors import ConfigError
from tether.server import load_engines


def test_defaults_are_llama_cpps_cpu_defaults() -> None:
    assert llama_kwargs(LlamaOptions()) == {
        "n_gpu_layers": 0,
        "flash_attn": False,
        "type_k": 1,  # GGML_TYPE_F16
        "type_v": 1,
        "use_mmap": True,
        "use_mlock": False,
    }


def test_every_option_lands_in_its_own_kwarg() -> None:
    options = LlamaOptions(
        gpu_layers=12, flash_attn=True, cache_type_k="q8_0", cache_type_v="q4_0", mmap=False, mlock=True
    )
    assert llama_kwargs(options) == {
        "n_gpu_layers": 12,
        "flash_attn": True,
        "type_k": 8,  # GGML_TYPE_Q8_0
        "type_v": 2,  # GGML_TYPE_Q4_0
        "use_mmap": False,
        "use_mlock": True,
    }
    # K and V are not swapped anywhere on the way.
    flipped = llama_kwargs(LlamaOptions(flash_attn=True, cache_type_k="f32", cache_type_v="q5_1"))
    assert (flipped["type_k"], flipped["type_v"]) == (0, 7)


def test_all_layers_is_minus_one_as_llama_cpp_spells_it() -> None:
    assert parse_gpu_layers("all") == parse_gpu_layers(" ALL ") == parse_gpu_layers(-1) == -1
    assert llama_kwargs(LlamaOptions(gpu_layers=parse_gpu_layers("all")))["n_gpu_layers"] == -1
    assert parse_gpu_layers("0") == 0 and parse_gpu_layers(33) == 33


@pytest.mark.parametrize("bad", ["lots", "-2", "1.5", ""])
def test_bad_gpu_layers_say_what_is_allowed(bad: str) -> None:
    with pytest.raises(ConfigError, match=r"'all' or a number of layers >= 0"):
        parse_gpu_layers(bad)
    with pytest.raises(ConfigError, match=r"'all' or a number of layers"):
        LlamaOptions(gpu_layers=-5)


def test_cache_type_ids_are_ggmls() -> None:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed")
    # In a child process: importing the bindings leaves a /dev/null handle open until exit.
    names = [f"GGML_TYPE_{name.upper()}" for name in CACHE_TYPES]
    script = (
        f"import json, llama_cpp; print(json.dumps({{n: getattr(llama_cpp, n, None) for n in {names!r}}}))"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    constants = json.loads(out)
    for name, kind in CACHE_TYPES.items():
        # The bindings leave out GGML_TYPE_BF16; ggml.h has it as 30.
        expected = constants[f"GGML_TYPE_{name.upper()}"]
        assert kind.ggml_type == (30 if expected is None and name == "bf16" else expected), name


def test_the_settings_choices_are_the_known_cache_types() -> None:
    assert list(get_args(CacheTypeName)) == list(CACHE_TYPES)


def test_unknown_cache_type_lists_the_known_ones() -> None:
    with pytest.raises(ConfigError) as caught:
        LlamaOptions(cache_type_k="q3_k")
    assert "--cache-type-k 'q3_k'" in caught.value.message
    assert all(name in caught.value.message for name in CACHE_TYPES)
    with pytest.raises(ConfigError, match=r"--cache-type-v 'int8'"):
        LlamaOptions(cache_type_v="int8", flash_attn=True)


@pytest.mark.parametrize("v_type", ["q8_0", "q4_0", "q4_1", "q5_0", "q5_1"])
def test_quantized_v_cache_needs_flash_attention_up_front(v_type: str) -> None:
    with pytest.raises(ConfigError) as caught:
        LlamaOptions(cache_type_v=v_type)
    message = caught.value.message
    assert f"--cache-type-v {v_type} needs --flash-attn" in message and "--cache-type-v f16" in message
    assert LlamaOptions(cache_type_v=v_type, flash_attn=True).cache_type_v == v_type


def test_a_quantized_k_cache_or_a_float_v_cache_needs_no_flash_attention() -> None:
    assert LlamaOptions(cache_type_k="q4_0").flash_attn is None
    assert LlamaOptions(cache_type_v="bf16").cache_type_v == "bf16"
    assert LlamaOptions(cache_type_v="f32").cache_type_v == "f32"


def test_attention_is_forced_either_way_or_llama_cpps_choice_where_a_context_takes_one() -> None:
    """Unset, the batched context lets llama.cpp choose; a serial ``Llama`` takes only on or off."""
    assert [attention(LlamaOptions(flash_attn=f), "batched") for f in (None, True, False)] == [
        "auto",
        "on",
        "off",
    ]
    assert [attention(LlamaOptions(flash_attn=f), "serial") for f in (None, True, False)] == [
        "off",
        "on",
        "off",
    ]
    assert llama_kwargs(LlamaOptions(flash_attn=False))["flash_attn"] is False
    assert LlamaOptions().describe("serial")["flash_attn"] == "off"
    with pytest.raises(ConfigError, match="--cache-type-v q8_0 needs --flash-attn"):
        LlamaOptions(cache_type_v="q8_0", flash_attn=False)


def test_offloaded_layers_follow_llama_cpps_count() -> None:
    # llama.cpp counts the output layer as one of n_gpu_layers, and offloads it first.
    assert [offloaded_layers(n, 24) for n in (0, 1, 2, 17, 24, 25, 99)] == [0, 0, 1, 16, 23, 24, 24]
    assert offloaded_layers(-1, 24) == 24


def test_describe_reports_all_as_all() -> None:
    assert LlamaOptions(gpu_layers=-1).describe()["gpu_layers"] == "all"
    assert LlamaOptions(gpu_layers=3, mlock=True).describe() == {
        "gpu_layers": 3,
        "flash_attn": "auto",  # the batched engine's
        "cache_type_k": "f16",
        "cache_type_v": "f16",
        "mmap": True,
        "mlock": True,
    }


def test_mlx_refuses_gpu_layers_saying_it_always_uses_the_gpu() -> None:
    with pytest.raises(ConfigError, match=r"MLX engine always runs on the GPU"):
        check_mlx(LlamaOptions(gpu_layers=-1))
    check_mlx(LlamaOptions())  # the defaults are fine


def test_mlx_refuses_the_llama_cpp_only_options_by_name() -> None:
    options = LlamaOptions(cache_type_k="q8_0", cache_type_v="q8_0", flash_attn=True, mmap=False, mlock=True)
    with pytest.raises(ConfigError) as caught:
        check_mlx(options)
    for flag in ("--cache-type-k q8_0", "--cache-type-v q8_0", "--flash-attn", "--no-mmap", "--mlock"):
        assert flag in caught.value.message
    with pytest.raises(ConfigError, match="--no-flash-attn"):
        check_mlx(LlamaOptions(flash_attn=False))


def test_engine_auto_choosing_mlx_for_a_directory_refuses_too(tmp_path: Path) -> None:
    # No MLX model is needed: the options are refused before anything is loaded.
    config = ServerConfig(model_path=str(tmp_path), llama_options=LlamaOptions(gpu_layers=4))
    with pytest.raises(ConfigError, match=r"MLX engine always runs on the GPU"):
        load_engines(config)
