"""OpenAI-compatible request bodies: ``/v1/chat/completions`` and ``/v1/completions``.

Pure: a prompt and the endpoint's capabilities in, the JSON bytes of one streaming request
out. Imports ``traces`` only.
"""

from __future__ import annotations

from typing import Any

import orjson

from traces.prompts.maker import Prompt
from traces.runinfo import Capabilities
from traces.schema import API_CHAT


def endpoint_path(api: str) -> str:
    """The path, relative to the base URL, for an ``api`` value of the trace."""
    return "/chat/completions" if api == API_CHAT else "/completions"


def build_body(
    *,
    api: str,
    model: str,
    prompt: Prompt,
    max_tokens: int,
    caps: Capabilities,
    extra: dict[str, Any] | None = None,
) -> bytes:
    """The JSON body of one streaming request, ready to send."""
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
