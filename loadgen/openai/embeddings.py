"""An ``/v1/embeddings`` reply body (not streamed), read once it has all arrived. Pure."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.openai.timings import ServerTimings, parse_timings
from traces.errors import shown


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbeddingsReply:
    """What a row keeps of an embeddings reply: its ``usage`` object as sent, how many
    embeddings it holds (``data``'s length), and what is wrong with it (None: nothing)."""

    usage: Any = None
    items: int | None = None
    error: str | None = None
    timings: ServerTimings | None = None
    """Server timings the reply carries (``metrics``/``timings``, ``parse_timings``)."""


def read_embeddings(body: bytes) -> EmbeddingsReply:
    """Read an OpenAI embeddings reply: ``{"object": "list", "data": [{"embedding": ...},
    ...], "usage": {"prompt_tokens": N, ...}}``. An error object, malformed JSON or a
    ``data`` that is not a list of objects is the reply's error."""
    if not body:
        return EmbeddingsReply(error="empty embeddings reply")
    try:
        obj = orjson.loads(body)
    except orjson.JSONDecodeError:
        return EmbeddingsReply(error=f"malformed embeddings reply: {body[:80]!r}")
    if not isinstance(obj, dict):
        return EmbeddingsReply(error=f"embeddings reply is not a JSON object: {body[:80]!r}")
    error = obj.get("error")
    if error is not None:
        message = error.get("message") if isinstance(error, dict) else error
        return EmbeddingsReply(error=f"server error: {message}")
    data = obj.get("data")
    usage = obj.get("usage")
    if not isinstance(data, list):
        return EmbeddingsReply(usage=usage, error=f"data = {shown(data)}: not a list")
    for i, item in enumerate(data):
        if not isinstance(item, dict) or item.get("embedding") is None:
            return EmbeddingsReply(
                usage=usage, error=f"data[{i}] = {shown(item)}: not an embedding object"
            )
    return EmbeddingsReply(usage=usage, items=len(data), timings=parse_timings(obj))
