"""Response bodies shaped like vLLM's OpenAI server, serialised with orjson.

Streaming (``text/event-stream``), each event is ``data: {json}\\n\\n``:

- chat: one role-only chunk ``delta {"role": "assistant", "content": ""}``, then content
  chunks ``delta {"content": "..."}``; the chunk with the last tokens carries
  ``finish_reason: "length"`` (vLLM puts it on the last content chunk, not on an empty one);
- chat answering with a tool call (``SimRequest.tool_call``): the same chunks with
  ``delta {"tool_calls": [...]}`` in place of content, in OpenAI's streamed shape: the
  first carries the call's ``index`` 0, ``id``, ``type: "function"`` and
  ``function.name`` with the first ``arguments`` fragment, the later ones ``index`` and
  an ``arguments`` fragment only; the arguments join into ``{"input":"<words>"}``, the
  braces glued to the first and last words so that they count as many words as tokens
  (a live session history sends them back as the assistant's text); the last has
  ``finish_reason: "tool_calls"``. The shape is that of the ``tool_calls`` of OpenAI's
  ``ChatCompletionChunk.Choice.Delta`` (openai-python/openai-node typings: ``index``,
  ``id``, ``type``, ``function.name``, ``function.arguments``);
- completions: content chunks with ``choices[0].text``, the last one with the finish reason;
- with ``stream_options.include_usage``: a usage-only chunk, ``"choices": []``;
- with ``continuous_usage_stats`` too: every chunk carries cumulative ``usage``;
- finally ``data: [DONE]\\n\\n``.

The last event before ``[DONE]`` (the usage chunk if requested, else the finishing chunk)
carries the simulator's ground truth as a top-level ``metrics`` object. Non-streaming bodies
carry ``usage`` and ``metrics`` too. Errors are OpenAI-style ``{"error": {...}}``.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.sim.engine import GroundTruth
from loadgen.sim.request import SimRequest

DONE = b"data: [DONE]\n\n"
MALFORMED = b'data: {"id": "malformed", "choices": [{"delta": {"content": "\n\n'
"""A chunk that is not valid JSON (a truncated object), sent by the malformed fault."""
FINISH_REASON = "length"
TOOL_FINISH_REASON = "tool_calls"
ARGS_OPEN = '{"input":"'
ARGS_CLOSE = '"}'
"""A tool call's arguments are ``ARGS_OPEN`` + the generated words (less the first one's
leading space) + ``ARGS_CLOSE``: JSON, one whitespace-separated word per token."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Usage:
    """Token counts of one response."""

    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0

    def as_json(self, *, details: bool) -> dict[str, Any]:
        """The OpenAI ``usage`` object; ``details`` adds ``prompt_tokens_details``."""
        usage: dict[str, Any] = {
            "prompt_tokens": self.prompt_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "completion_tokens": self.completion_tokens,
        }
        if details:
            usage["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return usage


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + orjson.dumps(obj) + b"\n\n"


class ResponseFormatter:
    """Builds every body of one request's response; holds its id, model and options."""

    def __init__(self, request: SimRequest, *, model: str, request_id: str) -> None:
        self._request = request
        self._chat = request.api == "chat"
        self._id = ("chatcmpl-" if self._chat else "cmpl-") + request_id
        self._model = model
        self._created = int(time.time())  # wall clock: OpenAI's "created" Unix seconds
        self._object = "chat.completion.chunk" if self._chat else "text_completion"
        self._tool = request.tool_call if self._chat else None
        self._call_id = "call_" + request_id
        self._tool_started = False

    def _header(self, obj: str) -> dict[str, Any]:
        return {"id": self._id, "object": obj, "created": self._created, "model": self._model}

    def _usage(self, completion_tokens: int) -> dict[str, Any]:
        usage = Usage(
            prompt_tokens=self._request.prompt_tokens, completion_tokens=completion_tokens
        )
        return usage.as_json(details=False)

    def role_chunk(self) -> bytes | None:
        """The chat role-only chunk, or None for completions (which have none)."""
        if not self._chat:
            return None
        chunk = self._header(self._object)
        chunk["choices"] = [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "logprobs": None,
                "finish_reason": None,
            }
        ]
        if self._request.continuous_usage:
            chunk["usage"] = self._usage(0)
        return _event(chunk)

    def content_chunk(
        self,
        text: str,
        *,
        completion_tokens: int,
        last: bool,
        truth: GroundTruth | None = None,
    ) -> bytes:
        """A content chunk; ``completion_tokens`` is the cumulative count including it."""
        finish = FINISH_REASON if last else None
        chunk = self._header(self._object)
        choice: dict[str, Any]
        if self._tool is not None:
            choice = {
                "index": 0,
                "delta": {"tool_calls": [self._tool_delta(text, last=last)]},
                "logprobs": None,
                "finish_reason": TOOL_FINISH_REASON if last else None,
            }
            if last:
                choice["stop_reason"] = None
        elif self._chat:
            choice = {
                "index": 0,
                "delta": {"content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
            if last:
                choice["stop_reason"] = None
        else:
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": finish,
                "stop_reason": None,
            }
        chunk["choices"] = [choice]
        if self._request.continuous_usage:
            chunk["usage"] = self._usage(completion_tokens)
        elif not self._chat:
            chunk["usage"] = None  # vLLM serialises completions chunks with unset fields
        if truth is not None:
            chunk["metrics"] = truth.as_json()
        return _event(chunk)

    def _tool_delta(self, text: str, *, last: bool) -> dict[str, Any]:
        """One ``delta.tool_calls`` entry carrying ``text`` as an ``arguments`` fragment."""
        args = (text if self._tool_started else ARGS_OPEN + text.removeprefix(" ")) + (
            ARGS_CLOSE if last else ""
        )
        if self._tool_started:
            return {"index": 0, "function": {"arguments": args}}
        self._tool_started = True
        return {
            "index": 0,
            "id": self._call_id,
            "type": "function",
            "function": {"name": self._tool, "arguments": args},
        }

    def usage_chunk(self, *, completion_tokens: int, truth: GroundTruth) -> bytes:
        """The final usage-only chunk (``"choices": []``) with the ground truth."""
        chunk = self._header(self._object)
        chunk["choices"] = []
        chunk["usage"] = Usage(
            prompt_tokens=self._request.prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=truth.cached_tokens,
        ).as_json(details=True)
        chunk["metrics"] = truth.as_json()
        return _event(chunk)

    def done(self) -> bytes:
        """The stream's last event: ``data: [DONE]`` (the Responses API sends none)."""
        return DONE

    def full_response(
        self, text: str, *, completion_tokens: int, truth: GroundTruth, metrics: bool = True
    ) -> bytes:
        """The whole non-streaming response body; ``metrics=False`` leaves out the ground
        truth (TGI-style replies carry their timings in headers)."""
        if self._chat:
            body = self._header("chat.completion")
            message: dict[str, Any] = {"role": "assistant", "content": text, "tool_calls": []}
            if self._tool is not None:
                args = ARGS_OPEN + text.removeprefix(" ") + ARGS_CLOSE
                function = {"name": self._tool, "arguments": args}
                call = {"id": self._call_id, "type": "function", "function": function}
                message = {"role": "assistant", "content": None, "tool_calls": [call]}
            choice: dict[str, Any] = {
                "index": 0,
                "message": message,
                "logprobs": None,
                "finish_reason": TOOL_FINISH_REASON if self._tool else FINISH_REASON,
                "stop_reason": None,
            }
        else:
            body = self._header("text_completion")
            choice = {
                "index": 0,
                "text": text,
                "logprobs": None,
                "finish_reason": FINISH_REASON,
                "stop_reason": None,
            }
        body["choices"] = [choice]
        body["usage"] = Usage(
            prompt_tokens=self._request.prompt_tokens,
            completion_tokens=completion_tokens,
            cached_tokens=truth.cached_tokens,
        ).as_json(details=True)
        if metrics:
            body["metrics"] = truth.as_json()
        return orjson.dumps(body)


def error_body(message: str, *, kind: str, code: int, param: str | None = None) -> bytes:
    """An OpenAI-style error body: ``{"error": {"message", "type", "param", "code"}}``."""
    return orjson.dumps({"error": {"message": message, "type": kind, "param": param, "code": code}})


def models_body(model: str, *, created: int, meta: dict[str, object] | None = None) -> bytes:
    """The ``GET /v1/models`` body listing the one served model (plus ``meta`` fields)."""
    card: dict[str, object] = {
        "id": model, "object": "model", "created": created, "owned_by": "loadgen-sim"
    }  # fmt: skip
    card["root"] = model
    card.update(meta or {})
    return orjson.dumps({"object": "list", "data": [card]})
