"""The Responses API's memory: the last N responses, for ``previous_response_id`` and ``GET /v1/responses/{id}``.

Bounded (least recently used out first) and in memory only: a restart forgets every response,
as does eviction; either way a later ``previous_response_id`` naming it is a 404. Lives on
``app.state.tether.responses``; every access happens on the event loop, so it needs no lock.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from tether.caches import CacheFill
from tether.chat import Message
from tether.errors import ResponseNotFoundError

__all__ = ["DEFAULT_SIZE", "ResponseStore", "StoredResponse"]

DEFAULT_SIZE = 256


@dataclass(frozen=True)
class StoredResponse:
    """A response as sent (``body``) and the conversation through it, instructions left out
    (a follow-up's own ``instructions`` replace them, as in OpenAI's API)."""

    body: dict[str, Any]
    history: tuple[Message, ...]


class ResponseStore:
    """At most ``size`` responses by id; ``size`` 0 keeps none."""

    def __init__(self, size: int = DEFAULT_SIZE) -> None:
        self.size = size
        self._items: OrderedDict[str, StoredResponse] = OrderedDict()

    def __len__(self) -> int:
        return len(self._items)

    def cache_fill(self) -> dict[str, CacheFill]:
        return {"responses": CacheFill(len(self._items), max(0, self.size))}

    def put(self, response_id: str, item: StoredResponse) -> None:
        if self.size <= 0:
            return
        self._items[response_id] = item
        self._items.move_to_end(response_id)
        while len(self._items) > self.size:
            self._items.popitem(last=False)

    def get(self, response_id: str, *, param: str | None = None) -> StoredResponse:
        """The stored response, marked as recently used; ``ResponseNotFoundError`` (404) if absent."""
        item = self._items.get(response_id)
        if item is None:
            raise ResponseNotFoundError(
                f"response with id {response_id!r} not found (this server keeps the last {self.size} "
                "responses in memory, until it restarts)",
                param=param,
            )
        self._items.move_to_end(response_id)
        return item

    def delete(self, response_id: str) -> None:
        self.get(response_id)
        del self._items[response_id]
