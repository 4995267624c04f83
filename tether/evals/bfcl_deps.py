"""Importing the pieces of the ``bfcl-eval`` package that the BFCL suite uses, and nothing else.

``bfcl-eval`` is installed with ``--no-deps`` (``scripts/install_bfcl.sh``): its
declared dependencies pull every vendor SDK (boto3, cohere, google-genai,
mistralai, qwen-agent, sentence-transformers with torch, faiss, ...), none of
which the AST categories use. What is imported here:

* ``bfcl_eval.utils`` — dataset and ground-truth loading (needs ``filelock``);
* ``bfcl_eval.model_handler.utils`` — ``convert_to_tool``, BFCL's own
  function-doc to OpenAI-tool conversion (needs ``tenacity`` and the pinned
  ``tree_sitter`` 0.21 / ``tree-sitter-java`` / ``tree-sitter-javascript``
  wheels its parsers load at import time);
* ``bfcl_eval.eval_checker.multi_turn_eval`` — the multi-turn categories' executable backends
  (``execute_multi_turn_func_call``) and state/response checker (``multi_turn_checker``), with
  BFCL's step limit and the message that announces held-out functions (``mpmath`` is what its
  MathAPI backend needs);
* ``bfcl_eval/eval_checker/ast_eval/ast_checker.py`` — the AST checker, loaded
  from its file. Its only heavy import is
  ``bfcl_eval.constants.model_config.MODEL_CONFIG_MAPPING``, which imports every
  model handler (and so every SDK) just to build a table; the checker reads one
  field of it, ``underscore_to_dot``, in ``convert_func_name``. That one module
  is the single unavoidable shim: while the checker file executes,
  ``sys.modules`` holds a stand-in ``model_config`` whose mapping has one entry,
  :data:`CHECKER_MODEL`, with ``underscore_to_dot=True`` — what BFCL sets for
  OpenAI-compatible function-calling models, whose tool names cannot contain
  ``.`` (``convert_to_tool`` turns ``math.sqrt`` into ``math_sqrt``). The
  stand-in is removed right after, so nothing else ever sees it.

``bfcl_eval`` writes result/score/lock folders under ``BFCL_PROJECT_ROOT`` when
``bfcl_eval.constants.eval_config`` is imported; it is pointed at a cache folder
(``~/.cache/tether/bfcl`` unless already set) instead of ``site-packages``.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
import types
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

from tether.errors import ConfigError

__all__ = [
    "BFCL_VERSION",
    "CHECKER_MODEL",
    "BfclModules",
    "MultiTurnModules",
    "bfcl_modules",
    "data_dir",
    "multi_turn_modules",
]

BFCL_VERSION = "2026.3.23"
CHECKER_MODEL = "tether-openai-compatible-FC"
_INSTALL_HINT = "the BFCL suite needs bfcl-eval: run scripts/install_bfcl.sh"


@dataclass(frozen=True)
class ModelConfigStandIn:
    """The one ``ModelConfig`` field the AST checker reads."""

    underscore_to_dot: bool = True


@dataclass(frozen=True)
class BfclModules:
    """The loaded BFCL functions the suite calls."""

    version: str
    load_dataset_entry: Any
    load_ground_truth_entry: Any
    convert_to_tool: Any
    gorilla_to_openapi: dict[str, str]
    openai_style: Any
    ast_checker: Any
    is_empty_output: Any
    is_function_calling_format_output: Any
    language: Any


def _cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "tether" / "bfcl"


def _installed_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("bfcl-eval")
    except metadata.PackageNotFoundError as exc:
        raise ConfigError(_INSTALL_HINT) from exc


def data_dir() -> Path:
    """The ``data`` folder shipped inside the installed ``bfcl_eval`` package."""
    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(_INSTALL_HINT)
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def _load_checker(package_root: Path) -> types.ModuleType:
    """Execute ``ast_checker.py`` with the ``model_config`` stand-in present only meanwhile."""
    path = package_root / "eval_checker" / "ast_eval" / "ast_checker.py"
    name = "bfcl_eval.eval_checker.ast_eval.ast_checker"
    if name in sys.modules:
        return sys.modules[name]
    stand_in = types.ModuleType("bfcl_eval.constants.model_config")
    stand_in.MODEL_CONFIG_MAPPING = {CHECKER_MODEL.replace("_", "/"): ModelConfigStandIn()}  # type: ignore[attr-defined]
    key = "bfcl_eval.constants.model_config"
    previous = sys.modules.get(key)
    sys.modules[key] = stand_in
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ConfigError(f"cannot load the BFCL AST checker from {path}")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        if previous is None:
            sys.modules.pop(key, None)
        else:
            sys.modules[key] = previous
    sys.modules[name] = module
    return module


@cache
def bfcl_modules() -> BfclModules:
    """Import once; raise ``ConfigError`` with the install hint when something is missing."""
    version = _installed_version()
    if version != BFCL_VERSION:
        raise ConfigError(f"bfcl-eval {BFCL_VERSION} is pinned, {version} is installed; {_INSTALL_HINT}")
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(_cache_root()))
    try:
        butils = importlib.import_module("bfcl_eval.utils")
        hutils = importlib.import_module("bfcl_eval.model_handler.utils")
        mappings = importlib.import_module("bfcl_eval.constants.type_mappings")
        enums = importlib.import_module("bfcl_eval.constants.enums")
    except ImportError as exc:
        raise ConfigError(f"{_INSTALL_HINT} ({exc})") from exc
    checker = _load_checker(data_dir().parent)
    return BfclModules(
        version=version,
        load_dataset_entry=butils.load_dataset_entry,
        load_ground_truth_entry=butils.load_ground_truth_entry,
        convert_to_tool=hutils.convert_to_tool,
        gorilla_to_openapi=dict(mappings.GORILLA_TO_OPENAPI),
        openai_style=enums.ModelStyle.OPENAI_COMPLETIONS,
        ast_checker=checker.ast_checker,
        is_empty_output=butils.is_empty_output,
        is_function_calling_format_output=butils.is_function_calling_format_output,
        language=enums.Language,
    )


@dataclass(frozen=True)
class MultiTurnModules:
    """BFCL's multi-turn executor, checker and the constants its inference loop uses."""

    execute: Any
    checker: Any
    is_empty_execute_response: Any
    convert_to_function_call: Any
    executor_state: dict[str, Any]
    step_limit: int
    added_functions_prompt: str


@cache
def multi_turn_modules() -> MultiTurnModules:
    """Import once (after :func:`bfcl_modules`, which points BFCL's folders at the cache)."""
    bfcl_modules()  # first: it points BFCL's result and lock folders at the cache
    try:
        utils = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_utils")
        checker = importlib.import_module("bfcl_eval.eval_checker.multi_turn_eval.multi_turn_checker")
        prompts = importlib.import_module("bfcl_eval.constants.default_prompts")
        hutils = importlib.import_module("bfcl_eval.model_handler.utils")
        importlib.import_module("mpmath")
    except ImportError as exc:
        raise ConfigError(f"{_INSTALL_HINT} ({exc})") from exc
    return MultiTurnModules(
        execute=utils.execute_multi_turn_func_call,
        checker=checker.multi_turn_checker,
        is_empty_execute_response=utils.is_empty_execute_response,
        convert_to_function_call=hutils.convert_to_function_call,
        executor_state=vars(utils),
        step_limit=int(prompts.MAXIMUM_STEP_LIMIT),
        added_functions_prompt=str(prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC),
    )
