"""OpenAI-compatible request bodies: ``/v1/chat/completions``, ``/v1/completions``,
``/v1/responses`` (streamed events) and ``/v1/embeddings`` (not streamed).

Pure: a prompt and the endpoint's capabilities in, the JSON bytes of one request out
(streamed unless ``stream=False`` or embeddings). Fields merge in this order, later wins:
ours (model, prompt, ``max_tokens``, usage options), the probed vLLM-style extras
(``ignore_eos``, ``min_tokens`` = ``max_tokens``), ``--extra-body``, then the trace row's own
sampling columns, and last the row's ``tools`` (chat and Responses API bodies only).
``--extra-body`` may not set what the client owns (``OWNED_FIELDS``).
Imports ``traces`` only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

import orjson

from traces.prompts.maker import Prompt, PromptMaker
from traces.records import TraceRequest
from traces.runinfo import Capabilities
from traces.schema import API_CHAT, API_COMPLETIONS, API_EMBEDDINGS, API_RESPONSES

_PATHS = {
    API_CHAT: "/chat/completions",
    API_COMPLETIONS: "/completions",
    API_RESPONSES: "/responses",
    API_EMBEDDINGS: "/embeddings",
}

OWNED_FIELDS: Final = frozenset(
    {
        "model",
        "messages",
        "prompt",
        "stream",
        "stream_options",
        "max_tokens",
        "max_completion_tokens",
        "n",
    }
)
"""Body fields the client sets itself: the model and prompt, streaming (the measurement
depends on it: ``--no-stream``), the output length (the trace's ``output_tokens``) and
``n`` (one choice per request, or the token counts mean nothing)."""


def endpoint_path(api: str) -> str:
    """The path, relative to the base URL, for an ``api`` value of the trace."""
    return _PATHS.get(api, "/completions")


def extra_body_problem(extra: object) -> str | None:
    """Why ``extra`` (the parsed ``--extra-body``) cannot be merged into every body, or
    None: it must be a JSON object, and none of its keys one the client owns."""
    if not isinstance(extra, dict):
        return f"must be a JSON object, got {type(extra).__name__}"
    owned = sorted(OWNED_FIELDS.intersection(extra))
    if owned:
        return (
            f"sets {', '.join(owned)}, which the client owns (model and prompt from the run, "
            "max_tokens from the trace's output_tokens, streaming from --no-stream)"
        )
    return None


def row_fields(req: TraceRequest) -> dict[str, Any] | None:
    """The trace row's own body fields (its non-null sampling columns), or None."""
    if (
        req.temperature is None
        and req.top_p is None
        and req.seed is None
        and req.min_tokens is None
        and req.ignore_eos is None
    ):
        return None
    out: dict[str, Any] = {}
    if req.temperature is not None:
        out["temperature"] = req.temperature
    if req.top_p is not None:
        out["top_p"] = req.top_p
    if req.seed is not None:
        out["seed"] = req.seed
    if req.min_tokens is not None:
        out["min_tokens"] = req.min_tokens
    if req.ignore_eos is not None:
        out["ignore_eos"] = req.ignore_eos
    return out


def build_body(
    *,
    api: str,
    model: str,
    prompt: Prompt,
    max_tokens: int,
    caps: Capabilities,
    extra: Mapping[str, Any] | None = None,
    row: Mapping[str, Any] | None = None,
    tools: str | None = None,
    stream: bool = True,
    embed_batch: int = 1,
) -> bytes:
    """The JSON body of one request, ready to send: ``extra`` is ``--extra-body``, ``row``
    the trace row's fields (``row_fields``). Chat and completions stream unless ``stream``
    is False; Responses API requests always stream (``--no-stream`` is for the engines'
    timing headers, which come on chat replies); embeddings never do, and their ``input``
    is the prompt's text cut into ``embed_batch`` parts of about equal words (one item
    each). ``tools`` is the row's tool definitions (JSON text of OpenAI function tools,
    validated with the trace): a chat body's ``tools`` as given, a Responses API body's in
    that API's flat shape (``{"type": "function", "name": ...}``); the other APIs take
    none."""
    if api == API_EMBEDDINGS:
        return _embeddings_body(model, prompt, embed_batch, extra, row)
    if api == API_RESPONSES:
        return _responses_body(model, prompt, max_tokens, caps, extra, row, tools)
    body: dict[str, Any] = {"model": model, "stream": stream, "max_tokens": max_tokens}
    if api == API_CHAT:
        if prompt.messages_json is not None:
            body["messages"] = orjson.loads(prompt.messages_json)
        elif prompt.images:
            parts: list[dict[str, Any]] = [{"type": "text", "text": prompt.text or ""}]
            parts.extend({"type": "image_url", "image_url": {"url": url}} for url in prompt.images)
            body["messages"] = [{"role": "user", "content": parts}]
        else:
            body["messages"] = [{"role": "user", "content": prompt.text or ""}]
    else:
        body["prompt"] = prompt.text if prompt.text is not None else ""
    if stream and caps.include_usage:
        options: dict[str, bool] = {"include_usage": True}
        if caps.continuous_usage:
            options["continuous_usage_stats"] = True
        body["stream_options"] = options
    if caps.ignore_eos:
        body["ignore_eos"] = True
    if caps.min_tokens:
        body["min_tokens"] = max_tokens
    if extra:
        body.update(extra)
    if row:
        body.update(row)
    if tools is not None and api == API_CHAT:
        body["tools"] = orjson.loads(tools)
    return orjson.dumps(body)


@dataclass(frozen=True, slots=True, kw_only=True)
class BodyRecipe:
    """How one run builds each request's body from its trace row: the prompt maker and
    the body's fixed parts. Picklable, and light to import: the body preparer's process
    (``loadgen.prepare.worker``) builds with it, as the replay does
    (``loadgen.prepare.preparer``)."""

    prompts: PromptMaker
    model: str
    capabilities: Capabilities
    extra_body: Mapping[str, Any] | None = None
    stream: bool = True
    embed_batch: int = 1

    def build(self, req: TraceRequest) -> bytes:
        """The JSON body of ``req``: its prompt (and images) materialised."""
        return build_body(
            api=req.api,
            model=self.model,
            prompt=self.prompts.make(req),
            max_tokens=req.output_tokens,
            caps=self.capabilities,
            extra=self.extra_body,
            row=row_fields(req),
            tools=req.tools,
            stream=self.stream,
            embed_batch=self.embed_batch,
        )


def responses_tools(tools: str) -> list[dict[str, Any]]:
    """Chat-style function tools (``{"type": "function", "function": {...}}``) in the
    Responses API's flat shape: the function's fields beside ``"type": "function"``."""
    out: list[dict[str, Any]] = []
    for tool in orjson.loads(tools):
        flat: dict[str, Any] = {"type": "function"}
        flat.update(tool.get("function") or {})
        out.append(flat)
    return out


def _user_messages(prompt: Prompt) -> list[dict[str, Any]]:
    if prompt.messages_json is not None:
        messages: list[dict[str, Any]] = orjson.loads(prompt.messages_json)
        return messages
    return [{"role": "user", "content": prompt.text or ""}]


def _responses_body(
    model: str,
    prompt: Prompt,
    max_tokens: int,
    caps: Capabilities,
    extra: Mapping[str, Any] | None,
    row: Mapping[str, Any] | None,
    tools: str | None = None,
) -> bytes:
    """A streamed ``/v1/responses`` request: ``input`` is the prompt's text (or its chat
    messages), ``max_output_tokens`` the trace's output tokens; images ride as
    ``input_image`` parts. Usage always comes with ``response.completed``."""
    body: dict[str, Any] = {"model": model, "stream": True, "max_output_tokens": max_tokens}
    if prompt.images and prompt.messages_json is None:
        parts: list[dict[str, Any]] = [{"type": "input_text", "text": prompt.text or ""}]
        parts.extend({"type": "input_image", "image_url": url} for url in prompt.images)
        body["input"] = [{"role": "user", "content": parts}]
    elif prompt.messages_json is not None:
        body["input"] = _user_messages(prompt)
    else:
        body["input"] = prompt.text or ""
    if caps.ignore_eos:
        body["ignore_eos"] = True
    if caps.min_tokens:
        body["min_tokens"] = max_tokens
    if extra:
        body.update(extra)
    if row:
        body.update(row)
    if tools is not None:
        body["tools"] = responses_tools(tools)
    return orjson.dumps(body)


def _embeddings_body(
    model: str,
    prompt: Prompt,
    embed_batch: int,
    extra: Mapping[str, Any] | None,
    row: Mapping[str, Any] | None,
) -> bytes:
    """An ``/v1/embeddings`` request: ``input`` is a list of ``embed_batch`` strings."""
    text = prompt.text
    if text is None and prompt.messages_json is not None:
        text = " ".join(
            str(m.get("content", "")) for m in _user_messages(prompt) if isinstance(m, dict)
        )
    body: dict[str, Any] = {"model": model, "input": split_words(text or "", embed_batch)}
    if extra:
        body.update(extra)
    if row and "seed" in row:  # sampling fields mean nothing to an embedding
        body["seed"] = row["seed"]
    return orjson.dumps(body)


def split_words(text: str, parts: int) -> list[str]:
    """``text`` cut at word boundaries into ``parts`` pieces of about equal word counts
    (never an empty piece while there are words to share; fewer pieces than ``parts`` only
    when the text has fewer words)."""
    if parts <= 1:
        return [text]
    words = text.split()
    n = max(1, min(parts, len(words)))
    return [" ".join(words[i * len(words) // n : (i + 1) * len(words) // n]) for i in range(n)]
