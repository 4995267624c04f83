"""Rebuilding a Hugging Face tokenizer from a GGUF file's vocabulary.

llama.cpp keeps the whole tokenizer in the GGUF metadata (``tokenizer.ggml.*``): the token strings
(already in GPT-2's byte-to-unicode form for BPE vocabularies), the merges in rank order, a type per
token, the special ids and the name of the pre-tokenizer. This module turns that into the
``tokenizer.json`` / ``tokenizer_config.json`` pair an MLX model directory carries, so that the
``tokenizers`` library splits text into exactly the ids llama.cpp does.

Only byte-level BPE vocabularies (``tokenizer.ggml.model == "gpt2"``) with a pre-tokenizer whose
llama.cpp regexes are known here are supported; anything else raises ``ConfigError`` rather than
producing a tokenizer that silently disagrees with llama.cpp.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.errors import ConfigError

__all__ = [
    "EOG_TEXTS",
    "PRE_TOKENIZERS",
    "GgufVocab",
    "build_tokenizer_json",
    "eog_token_ids",
    "write_tokenizer_files",
]

# llama.cpp token types (``llama_token_type``).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6

# ``tokenizer.ggml.pre`` -> whether llama.cpp splits every digit off first (``\p{N}``) before the
# GPT-2 regex. Both groups use GPT-2's regex, which is also what the ``ByteLevel`` pre-tokenizer runs.
PRE_TOKENIZERS: dict[str, bool] = {
    "smollm": True,
    "starcoder": True,
    "refact": True,
    "command-r": True,
    "codeshell": True,
    "exaone": True,
    "minerva-7b": True,
    "gpt-2": False,
    "phi-2": False,
    "mpt": False,
    "olmo": False,
    "jais": False,
}

# Tokens llama.cpp ends a generation on, recognised by their text (llama-vocab.cpp, "special_eog_ids").
EOG_TEXTS = frozenset(
    {
        "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<end_of_turn>", "<|endoftext|>",
        "<|eom_id|>", "<EOT>", "_<EOT>", "<|end_of_text|>", "<end_of_utterance>",
    }
)  # fmt: skip
# Fill-in-the-middle pad / repo / file-separator tokens, which llama.cpp also treats as end of generation.
_FIM_EOG_TEXTS = (
    ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>"),
    ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    ("<|file_sep|>",),
)


@dataclass(frozen=True)
class GgufVocab:
    """The tokenizer part of a GGUF file's metadata."""

    tokens: list[str]
    token_types: list[int]
    merges: list[str]
    pre: str
    bos_id: int | None
    eos_id: int | None
    unk_id: int | None
    pad_id: int | None
    add_bos: bool
    chat_template: str | None
    context_length: int

    @classmethod
    def from_metadata(cls, meta: Mapping[str, Any], *, context_length: int) -> GgufVocab:
        model = meta.get("tokenizer.ggml.model")
        if model != "gpt2":
            raise ConfigError(f"only byte-level BPE (gpt2) GGUF vocabularies can be converted, not {model!r}")
        pre = str(meta.get("tokenizer.ggml.pre", "default"))
        if pre not in PRE_TOKENIZERS:
            raise ConfigError(
                f"GGUF pre-tokenizer {pre!r} is not supported (known: {sorted(PRE_TOKENIZERS)})"
            )
        tokens = [str(t) for t in meta["tokenizer.ggml.tokens"]]
        types = [int(t) for t in meta.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))]

        def opt_id(key: str) -> int | None:
            value = meta.get(f"tokenizer.ggml.{key}_token_id")
            return int(value) if value is not None else None

        template = meta.get("tokenizer.chat_template")
        return cls(
            tokens=tokens,
            token_types=types,
            merges=[str(m) for m in meta["tokenizer.ggml.merges"]],
            pre=pre,
            bos_id=opt_id("bos"),
            eos_id=opt_id("eos"),
            unk_id=opt_id("unknown"),
            pad_id=opt_id("padding"),
            add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
            chat_template=str(template) if template is not None else None,
            context_length=context_length,
        )

    def text(self, token_id: int | None) -> str | None:
        return self.tokens[token_id] if token_id is not None and 0 <= token_id < len(self.tokens) else None


def eog_token_ids(vocab: GgufVocab) -> list[int]:
    """The ids llama.cpp stops on: EOS, the EOG-looking texts and the first FIM pad/repo/sep token."""
    index = {t: i for i, t in enumerate(vocab.tokens)}
    out: list[int] = [vocab.eos_id] if vocab.eos_id is not None else []
    for texts in _FIM_EOG_TEXTS:
        found = next((index[t] for t in texts if t in index), None)
        if found is not None:
            out.append(found)
    out += [i for t, i in index.items() if t in EOG_TEXTS]
    return sorted(set(out))


def _split_merge(merge: str) -> tuple[str, str]:
    # llama.cpp splits at the first space after position 0 (a pair's left side is never empty).
    at = merge.find(" ", 1)
    if at == -1:
        raise ConfigError(f"malformed BPE merge in GGUF: {merge!r}")
    return merge[:at], merge[at + 1 :]


def build_tokenizer_json(vocab: GgufVocab) -> str:
    """The serialized ``tokenizers.Tokenizer`` equivalent to llama.cpp's tokenizer for ``vocab``."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors

    ids = {t: i for i, t in enumerate(vocab.tokens)}
    if len(ids) != len(vocab.tokens):
        raise ConfigError(
            "GGUF vocabulary has duplicate token strings; it cannot be expressed as tokenizer.json"
        )
    bpe = models.BPE(
        vocab=ids,
        merges=[_split_merge(m) for m in vocab.merges],
        fuse_unk=False,
        byte_fallback=False,
    )
    tok = Tokenizer(bpe)
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if PRE_TOKENIZERS[vocab.pre]:
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Digits(individual_digits=True), byte_level]
        )
    else:
        tok.pre_tokenizer = byte_level
    tok.decoder = decoders.ByteLevel()
    # Control tokens are parsed as specials; user-defined ones as plain added tokens (llama.cpp parses both).
    special = [
        AddedToken(t, special=True, normalized=False)
        for t, kind in zip(vocab.tokens, vocab.token_types, strict=True)
        if kind in (CONTROL, UNKNOWN)
    ]
    user = [
        AddedToken(t, special=False, normalized=False)
        for t, kind in zip(vocab.tokens, vocab.token_types, strict=True)
        if kind == USER_DEFINED
    ]
    tok.add_special_tokens(special)
    tok.add_tokens(user)
    bos = vocab.text(vocab.bos_id)
    if vocab.add_bos and bos is not None and vocab.bos_id is not None:
        tok.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, vocab.bos_id)]
        )
    return str(tok.to_str())


def _tokenizer_config(vocab: GgufVocab) -> dict[str, Any]:
    decoder: dict[str, Any] = {}
    for i, (t, kind) in enumerate(zip(vocab.tokens, vocab.token_types, strict=True)):
        if kind in (CONTROL, UNKNOWN, USER_DEFINED):
            decoder[str(i)] = {
                "content": t,
                "lstrip": False,
                "normalized": False,
                "rstrip": False,
                "single_word": False,
                "special": kind != USER_DEFINED,
            }
    config: dict[str, Any] = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "add_bos_token": vocab.add_bos,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": vocab.context_length,
        "added_tokens_decoder": decoder,
    }
    for name, token_id in (
        ("bos", vocab.bos_id),
        ("eos", vocab.eos_id),
        ("unk", vocab.unk_id),
        ("pad", vocab.pad_id),
    ):
        text = vocab.text(token_id)
        if text is not None:
            config[f"{name}_token"] = text
    if vocab.chat_template is not None:
        config["chat_template"] = vocab.chat_template
    return config


def write_tokenizer_files(vocab: GgufVocab, out_dir: Path) -> None:
    """Write ``tokenizer.json``, ``tokenizer_config.json`` and ``special_tokens_map.json`` into ``out_dir``."""
    (out_dir / "tokenizer.json").write_text(build_tokenizer_json(vocab), encoding="utf-8")
    config = _tokenizer_config(vocab)
    (out_dir / "tokenizer_config.json").write_text(
        json.dumps(config, indent=2, ensure_ascii=False), encoding="utf-8"
    )
    specials = {k: config[k] for k in ("bos_token", "eos_token", "unk_token", "pad_token") if k in config}
    (out_dir / "special_tokens_map.json").write_text(json.dumps(specials, indent=2), encoding="utf-8")
