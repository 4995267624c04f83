"""The HTTP side of a remote engine: JSON requests and server-sent-event streams, errors mapped once.

Synchronous on purpose: an engine runs on the scheduler's worker thread. A stream is a
context manager; leaving it closes the connection, which is how a remote server learns
that tether's client hung up and stops decoding.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from tether.errors import BackendUnavailableError, ConfigError, EngineError, TetherError

__all__ = ["RemoteClient", "connecting"]

_SHORT_TIMEOUT = httpx.Timeout(30.0, connect=10.0)


class RemoteClient:
    """JSON over HTTP to one remote engine at ``base_url``."""

    def __init__(self, base_url: str, *, api_key: str | None = None, timeout_s: float = 600.0) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(
            base_url=self.base_url,
            headers=headers,
            timeout=httpx.Timeout(timeout_s, connect=10.0),
        )

    def get_json(self, path: str) -> dict[str, Any]:
        return self._json(self._send("GET", path, None))

    def post_json(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._json(self._send("POST", path, body))

    @contextmanager
    def stream(self, path: str, body: dict[str, Any]) -> Iterator[Iterator[dict[str, Any]]]:
        """The events of a streamed POST (``data: {...}`` lines, decoded)."""
        try:
            with self._http.stream("POST", path, json=body) as response:
                if response.status_code >= 400:
                    response.read()
                    raise self._refused(path, response)
                yield _events(response, self.base_url + path)
        except httpx.TransportError as exc:
            raise BackendUnavailableError(f"{self.base_url}{path}: {exc!r}") from None

    def close(self) -> None:
        self._http.close()

    def _send(self, method: str, path: str, body: dict[str, Any] | None) -> httpx.Response:
        try:
            # Short calls (tokenize, props): a stuck backend fails them in seconds, not minutes.
            response = self._http.request(method, path, json=body, timeout=_SHORT_TIMEOUT)
        except httpx.TransportError as exc:
            raise BackendUnavailableError(f"{self.base_url}{path} is not reachable: {exc!r}") from None
        if response.status_code >= 400:
            raise self._refused(path, response)
        return response

    def _json(self, response: httpx.Response) -> dict[str, Any]:
        try:
            value = response.json()
        except json.JSONDecodeError:
            raise BackendUnavailableError(f"{response.url} answered with non-JSON") from None
        if not isinstance(value, dict):
            raise BackendUnavailableError(
                f"{response.url} answered with {type(value).__name__}, not an object"
            )
        return value

    def _refused(self, path: str, response: httpx.Response) -> EngineError:
        detail = _error_text(response.text)
        message = f"{self.base_url}{path} answered {response.status_code}: {detail}"
        # 5xx and 429: the backend is down or busy (retryable); 4xx: tether sent something it refused.
        if response.status_code >= 500 or response.status_code == 429:
            return BackendUnavailableError(message)
        return EngineError(message)


@contextmanager
def connecting(
    url: str,
    *,
    api_key: str | None,
    timeout_s: float,
    errors: type[TetherError] = EngineError,
) -> Iterator[RemoteClient]:
    """A client for what tether reads from ``--backend url`` at start-up, closed on exit: ``errors``
    raised meanwhile become a ``ConfigError`` naming the backend (a ``ConfigError`` passes as it is)."""
    client = RemoteClient(url, api_key=api_key, timeout_s=timeout_s)
    try:
        yield client
    except ConfigError:
        raise
    except errors as exc:
        raise ConfigError(f"--backend {url}: {exc.message}") from None
    finally:
        client.close()


def _error_text(text: str) -> str:
    try:
        value = json.loads(text)
    except json.JSONDecodeError:
        return text[:300]
    if isinstance(value, dict):
        err = value.get("error", value)
        if isinstance(err, dict):
            return str(err.get("message") or err)[:300]
        return str(err)[:300]
    return text[:300]


def _events(response: httpx.Response, where: str) -> Iterator[dict[str, Any]]:
    for line in response.iter_lines():
        if not line or line.startswith(":"):
            continue
        field, _, data = line.partition(":")
        data = data.strip()
        if data == "[DONE]":
            return
        try:
            value = json.loads(data)
        except json.JSONDecodeError:
            raise BackendUnavailableError(f"{where} streamed a line that is not JSON: {line[:200]}") from None
        if field == "error" or (isinstance(value, dict) and "error" in value):
            raise EngineError(f"{where} failed mid-stream: {_error_text(data)}")
        if isinstance(value, dict):
            yield value
