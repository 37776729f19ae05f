"""OpenAI-compatible request bodies: ``/v1/chat/completions``, ``/v1/completions``,
``/v1/responses`` (streamed events) and ``/v1/embeddings`` (not streamed).

Pure: a prompt and the endpoint's capabilities in, the JSON bytes of one request out.
Imports ``traces`` only.
"""

from __future__ import annotations

from typing import Any

import orjson

from traces.prompts.maker import Prompt
from traces.runinfo import Capabilities
from traces.schema import API_CHAT, API_COMPLETIONS, API_EMBEDDINGS, API_RESPONSES

_PATHS = {
    API_CHAT: "/chat/completions",
    API_COMPLETIONS: "/completions",
    API_RESPONSES: "/responses",
    API_EMBEDDINGS: "/embeddings",
}


def endpoint_path(api: str) -> str:
    """The path, relative to the base URL, for an ``api`` value of the trace."""
    return _PATHS.get(api, "/completions")


def build_body(
    *,
    api: str,
    model: str,
    prompt: Prompt,
    max_tokens: int,
    caps: Capabilities,
    extra: dict[str, Any] | None = None,
    embed_batch: int = 1,
) -> bytes:
    """The JSON body of one request, ready to send: streaming, except for embeddings,
    whose ``input`` is the prompt's text cut into ``embed_batch`` parts of about equal
    words (one item each)."""
    if api == API_EMBEDDINGS:
        return _embeddings_body(model, prompt, embed_batch, extra)
    if api == API_RESPONSES:
        return _responses_body(model, prompt, max_tokens, caps, extra)
    body: dict[str, Any] = {"model": model, "stream": True, "max_tokens": max_tokens}
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
    if caps.include_usage:
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
    return orjson.dumps(body)


def _user_messages(prompt: Prompt) -> list[dict[str, Any]]:
    if prompt.messages_json is not None:
        messages: list[dict[str, Any]] = orjson.loads(prompt.messages_json)
        return messages
    return [{"role": "user", "content": prompt.text or ""}]


def _responses_body(
    model: str, prompt: Prompt, max_tokens: int, caps: Capabilities, extra: dict[str, Any] | None
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
    return orjson.dumps(body)


def _embeddings_body(
    model: str, prompt: Prompt, embed_batch: int, extra: dict[str, Any] | None
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
