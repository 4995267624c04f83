"""How the embedded llama.cpp engine loads a model: GPU offload, flash attention, KV cache types, mmap, mlock.

``LlamaOptions`` is checked when it is built (a bad value is a ``ConfigError`` that says what to do);
``llama_kwargs`` is the one mapping from it to ``llama_cpp.Llama(...)`` keyword arguments. Nothing
here imports ``llama_cpp``: ggml's type ids are written out (``tests/unit/engine`` checks them against
the installed bindings) so the options can be validated and tested without the native library.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.errors import ConfigError

__all__ = [
    "CACHE_TYPES",
    "CacheType",
    "CacheTypeName",
    "LlamaOptions",
    "attention",
    "check_mlx",
    "llama_kwargs",
    "offloaded_layers",
    "parse_gpu_layers",
]

CacheTypeName = Literal["f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "bf16", "f32"]

ALL_LAYERS = -1  # llama.cpp's n_gpu_layers for "every layer"


@dataclass(frozen=True)
class CacheType:
    """One KV cache element type: ggml's ``enum ggml_type`` id and its size (block formats: block bytes / 32)."""

    ggml_type: int
    bytes_per_element: float

    @property
    def quantized(self) -> bool:
        return self.bytes_per_element < 2


# Ids from ggml.h; llama_cpp exposes every one as GGML_TYPE_* except BF16 (30).
CACHE_TYPES: Mapping[str, CacheType] = {
    "f16": CacheType(1, 2.0),
    "q8_0": CacheType(8, 34 / 32),
    "q4_0": CacheType(2, 18 / 32),
    "q4_1": CacheType(3, 20 / 32),
    "q5_0": CacheType(6, 22 / 32),
    "q5_1": CacheType(7, 24 / 32),
    "bf16": CacheType(30, 2.0),
    "f32": CacheType(0, 4.0),
}


def parse_gpu_layers(value: int | str) -> int:
    """``all`` (or llama.cpp's ``-1``) -> -1; a count of layers >= 0 -> itself."""
    text = str(value).strip().lower()
    if text in ("all", "-1"):
        return ALL_LAYERS
    try:
        layers = int(text)
    except ValueError:
        layers = -2
    if layers < 0:
        raise ConfigError(f"--gpu-layers must be 'all' or a number of layers >= 0 (got {value!r})")
    return layers


def offloaded_layers(gpu_layers: int, n_layers: int) -> int:
    """How many of a model's ``n_layers`` repeating layers (and their KV cache) llama.cpp puts on the GPU.

    The pinned llama.cpp counts the output layer as one of ``n_gpu_layers`` and offloads it first:
    N offloads the output layer and the last N - 1 repeating layers; N > n_layers offloads all of them.
    """
    if gpu_layers < 0:
        return n_layers
    return max(min(gpu_layers, n_layers + 1) - 1, 0)


@dataclass(frozen=True)
class LlamaOptions:
    """``gpu_layers``: -1 all, 0 CPU only, N as llama.cpp's ``-ngl N``; ``flash_attn``: forced on or off,
    or None for llama.cpp's own choice (the batched context; a serial ``Llama`` takes only on or off,
    so there None is off); the rest as their flags say."""

    gpu_layers: int = 0
    flash_attn: bool | None = None
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    mmap: bool = True
    mlock: bool = False

    def __post_init__(self) -> None:
        if self.gpu_layers < ALL_LAYERS:
            raise ConfigError(
                f"--gpu-layers must be 'all' or a number of layers >= 0 (got {self.gpu_layers})"
            )
        for which in ("k", "v"):
            name = getattr(self, f"cache_type_{which}")
            if name not in CACHE_TYPES:
                raise ConfigError(
                    f"--cache-type-{which} {name!r}: unknown KV cache type; known: {', '.join(CACHE_TYPES)}"
                )
        if CACHE_TYPES[self.cache_type_v].quantized and self.flash_attn is not True:
            raise ConfigError(
                f"--cache-type-v {self.cache_type_v} needs --flash-attn: llama.cpp refuses a quantized V cache "
                "without flash attention. Add --flash-attn (TETHER_FLASH_ATTN=true, or flash_attn = true in "
                "tether.toml), or keep --cache-type-v f16 (a quantized K cache alone works without it)."
            )

    def describe(self, layout: str = "batched") -> dict[str, str | int | bool]:
        """For logs: ``gpu_layers`` as given (``all`` or N), ``flash_attn`` as a context of ``layout``
        runs it (:func:`attention`)."""
        return {
            "gpu_layers": "all" if self.gpu_layers == ALL_LAYERS else self.gpu_layers,
            "flash_attn": attention(self, layout),
            "cache_type_k": self.cache_type_k,
            "cache_type_v": self.cache_type_v,
            "mmap": self.mmap,
            "mlock": self.mlock,
        }


def attention(options: LlamaOptions, layout: str) -> str:
    """``on``, ``off`` or ``auto`` (llama.cpp chooses; flash attention on CPU): what a context of
    ``layout`` runs. The batched context honours all three; a serial ``Llama`` takes only on or off."""
    if options.flash_attn is not None:
        return "on" if options.flash_attn else "off"
    return "auto" if layout == "batched" else "off"


def llama_kwargs(options: LlamaOptions) -> dict[str, Any]:
    """The ``llama_cpp.Llama(...)`` keyword arguments for ``options`` (-1 offloads every layer there too)."""
    return {
        "n_gpu_layers": options.gpu_layers,
        "flash_attn": options.flash_attn is True,
        "type_k": CACHE_TYPES[options.cache_type_k].ggml_type,
        "type_v": CACHE_TYPES[options.cache_type_v].ggml_type,
        "use_mmap": options.mmap,
        "use_mlock": options.mlock,
    }


def check_mlx(options: LlamaOptions) -> None:
    """The MLX engine has none of these knobs: refuse them rather than ignore them."""
    if options.gpu_layers != 0:
        raise ConfigError(
            "--gpu-layers is a llama.cpp option: the MLX engine always runs on the GPU (Apple's unified "
            "memory holds the whole model); drop --gpu-layers, or use --engine llama with a GGUF file"
        )
    default = LlamaOptions()
    given = [
        flag
        for flag, differs in (
            (f"--cache-type-k {options.cache_type_k}", options.cache_type_k != default.cache_type_k),
            (f"--cache-type-v {options.cache_type_v}", options.cache_type_v != default.cache_type_v),
            ("--flash-attn" if options.flash_attn else "--no-flash-attn", options.flash_attn is not None),
            ("--no-mmap", options.mmap != default.mmap),
            ("--mlock", options.mlock != default.mlock),
        )
        if differs
    ]
    if given:
        raise ConfigError(
            f"{', '.join(given)}: llama.cpp option(s) the MLX engine does not have (its KV cache is "
            "MLX's own, in the model's dtype); drop them, or use --engine llama with a GGUF file"
        )
