"""Which kind of server a ``--backend`` URL points at, asked once at start-up.

llama-server answers ``/props`` with its chat template; vLLM answers ``/version`` and lists
models ``owned_by: vllm``; Ollama answers ``/api/version``; anything else that lists
``/v1/models`` is taken as a plain OpenAI-compatible endpoint.
"""

from __future__ import annotations

from typing import Literal

import httpx

from tether.errors import ConfigError

__all__ = ["BackendKind", "detect_backend_kind"]

BackendKind = Literal["llama-server", "vllm", "ollama", "openai"]


def _json(client: httpx.Client, path: str) -> object | None:
    try:
        response = client.get(path)
    except httpx.HTTPError:
        return None
    if response.status_code != 200:
        return None
    try:
        value: object = response.json()
    except ValueError:
        return None
    return value


def detect_backend_kind(url: str, *, api_key: str | None = None, timeout_s: float = 10.0) -> BackendKind:
    """The kind of server at ``url``; ConfigError when nothing there answers like an engine."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    with httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout_s) as client:
        props = _json(client, "/props")
        if isinstance(props, dict) and "chat_template" in props and "default_generation_settings" in props:
            return "llama-server"
        models = _json(client, "/v1/models")
        owners = set()
        if isinstance(models, dict) and isinstance(models.get("data"), list):
            owners = {str(m.get("owned_by")) for m in models["data"] if isinstance(m, dict)}
        if "vllm" in owners:
            return "vllm"
        version = _json(client, "/api/version")
        if isinstance(version, dict) and "version" in version:
            return "ollama"
        if isinstance(models, dict):
            return "openai"
    raise ConfigError(
        f"--backend {url}: no engine answered there (tried /props, /v1/models, /api/version); "
        "is the server running, and is the URL its base (without /v1)?"
    )
