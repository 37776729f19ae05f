"""Bodies of the simulator's ``/v1/responses`` and ``/v1/embeddings`` replies.

Responses API, streamed (``event: <type>`` and ``data: {json}`` per event, each with its
``type`` and ``sequence_number``, as OpenAI sends them; no ``[DONE]``):
``response.created`` and ``response.in_progress`` first (where chat sends its role chunk),
one ``response.output_text.delta`` per content chunk, then ``response.output_text.done``
and ``response.completed``, whose ``response.usage`` holds ``input_tokens``,
``output_tokens`` and ``input_tokens_details.cached_tokens``, and which carries the
ground truth as a top-level ``metrics`` object (as chat's last chunk does). The simulator
runs every request to its limit, as with ``ignore_eos``; the status is ``completed``.
Not streamed: one ``response`` object with the same ``usage`` and ``metrics``.

Embeddings: ``{"object": "list", "data": [{"object": "embedding", "index": i,
"embedding": [...]}, ...], "usage": {"prompt_tokens", "total_tokens"}, "metrics"}`` with
``items`` vectors of ``dimensions`` floats each.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.sim.chunks import ResponseFormatter
from loadgen.sim.engine import GroundTruth
from loadgen.sim.request import SimRequest

MALFORMED_BODY = b'{"object": "list", "data": [{"object": "embedding", "embedding": [0.1, '
"""An embeddings reply cut short (not valid JSON), sent by the malformed fault."""


class ResponsesFormatter(ResponseFormatter):
    """``ResponseFormatter``'s events as the Responses API's typed events."""

    def __init__(self, request: SimRequest, *, model: str, request_id: str) -> None:
        super().__init__(request, model=model, request_id=request_id)
        self._id = "resp_" + request_id
        self._item = "msg_" + request_id
        self._seq = 0
        self._text: list[str] = []

    def _typed(self, kind: str, fields: dict[str, Any]) -> bytes:
        obj = {"type": kind, "sequence_number": self._seq, **fields}
        self._seq += 1
        return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(obj) + b"\n\n"

    def _response(self, status: str, **more: Any) -> dict[str, Any]:
        return {
            "id": self._id,
            "object": "response",
            "created_at": self._created,
            "status": status,
            "model": self._model,
            **more,
        }

    def _usage_json(self, completion_tokens: int, cached_tokens: int) -> dict[str, Any]:
        prompt = self._request.prompt_tokens
        return {
            "input_tokens": prompt,
            "input_tokens_details": {"cached_tokens": cached_tokens},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt + completion_tokens,
        }

    def _message(self, text: str) -> dict[str, Any]:
        return {
            "id": self._item,
            "type": "message",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": text, "annotations": []}],
        }

    def role_chunk(self) -> bytes | None:
        response = self._response("in_progress", output=[], usage=None)
        return self._typed("response.created", {"response": response}) + self._typed(
            "response.in_progress", {"response": response}
        )

    def content_chunk(
        self,
        text: str,
        *,
        completion_tokens: int,
        last: bool,
        truth: GroundTruth | None = None,
    ) -> bytes:
        self._text.append(text)
        return self._typed(
            "response.output_text.delta",
            {"item_id": self._item, "output_index": 0, "content_index": 0, "delta": text},
        )

    def usage_chunk(self, *, completion_tokens: int, truth: GroundTruth) -> bytes:
        text = "".join(self._text)
        done = self._typed(
            "response.output_text.done",
            {"item_id": self._item, "output_index": 0, "content_index": 0, "text": text},
        )
        response = self._response(
            "completed",
            output=[self._message(text)],
            usage=self._usage_json(completion_tokens, truth.cached_tokens),
        )
        return done + self._typed(
            "response.completed", {"response": response, "metrics": truth.as_json()}
        )

    def done(self) -> bytes:
        return b""

    def full_response(
        self, text: str, *, completion_tokens: int, truth: GroundTruth, metrics: bool = True
    ) -> bytes:
        body = self._response(
            "completed",
            output=[self._message(text)],
            usage=self._usage_json(completion_tokens, truth.cached_tokens),
        )
        if metrics:
            body["metrics"] = truth.as_json()
        return orjson.dumps(body)


def embeddings_body(request: SimRequest, *, model: str, truth: GroundTruth) -> bytes:
    """The whole ``/v1/embeddings`` reply: ``request.items`` vectors."""
    dims = request.dimensions
    vector = [round(((j * 37) % 101) / 101 - 0.5, 6) for j in range(dims)]
    data = [{"object": "embedding", "index": i, "embedding": vector} for i in range(request.items)]
    prompt = request.prompt_tokens
    return orjson.dumps(
        {
            "object": "list",
            "data": data,
            "model": model,
            "usage": {"prompt_tokens": prompt, "total_tokens": prompt},
            "metrics": truth.as_json(),
        }
    )
