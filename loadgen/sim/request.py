"""Parse an OpenAI completions, chat, responses or embeddings request body into the one
value the engine needs.

A Responses API request (``/v1/responses``) reads ``input`` (a string, or a list of
messages whose content is a string or ``input_text``/``input_image`` parts) and
``max_output_tokens``; its usage always comes with ``response.completed``. An embeddings
request (``/v1/embeddings``) reads ``input`` (a string, a list of strings, token ids or
lists of them) and ``dimensions``; it is costed as a prefill of all its inputs with one
step (``max_tokens`` 1) and never streams.

A chat request that carries ``tools`` (OpenAI function tools) is answered with a tool call
in one reply of ``TOOL_CALL_EVERY``, chosen by a hash of its ``messages`` (so the same
conversation gets the same answer on every run, whatever else the body holds), or as its
``tool_choice`` says (``"required"``, a named function, ``"none"``): the reply
streams ``delta.tool_calls`` in place of content, with the same timing
(``loadgen.sim.chunks``).

Only the fields that shape the simulated response are read; unknown fields are ignored, as an
OpenAI-compatible server does. Must not import the replay client
(loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, Literal

import orjson

from loadgen.errors import PromptShapeError, RequestError
from loadgen.sim.tokens import count_chat_prompt, count_completion_prompt, count_words

Api = Literal["chat", "completions", "responses", "embeddings"]
DEFAULT_DIMENSIONS = 16
"""Length of the simulator's embedding vectors unless the request asks (``dimensions``)."""
TOOL_CALL_EVERY: Final = 3
"""One chat request with ``tools`` in this many is answered with a tool call: those whose
``messages`` (as compact JSON) have a CRC-32 divisible by it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SimRequest:
    """One parsed generation request.

    ``max_tokens`` is what will be generated: the simulator always runs to the limit
    (as with ``ignore_eos``), so ``finish_reason`` is ``"length"``.
    """

    api: Api
    model: str | None
    stream: bool
    max_tokens: int
    prompt_tokens: int
    include_usage: bool
    continuous_usage: bool
    block_hashes: tuple[int, ...] = ()
    """Prefix-cache keys of the prompt's full blocks (set by the physics engine)."""
    encoder_s: float = 0.0
    """Vision-encoder model seconds for the prompt's images (set by the physics engine)."""
    items: int = 1
    """Embeddings: how many inputs (one embedding each)."""
    dimensions: int = DEFAULT_DIMENSIONS
    """Embeddings: the length of each vector."""
    tool_call: str | None = None
    """Chat: the function the reply calls (one of the request's ``tools``), streamed as
    ``delta.tool_calls`` in place of content; None: a content reply."""


def parse_request(
    body: object, *, api: Api, image_tokens: int, default_max_tokens: int
) -> SimRequest:
    """Validate ``body`` (decoded JSON) as a request of ``api``; raise RequestError if not."""
    if not isinstance(body, Mapping):
        raise RequestError("the request body must be a JSON object")
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise RequestError("model must be a string", param="model")
    if api == "embeddings":
        return _embeddings(body, model)
    try:
        if api == "chat":
            prompt_tokens = count_chat_prompt(body.get("messages"), image_tokens=image_tokens)
        elif api == "responses":
            prompt_tokens = _count_input(body.get("input"), image_tokens=image_tokens)
        else:
            if "prompt" not in body:
                raise PromptShapeError("prompt is required")
            prompt_tokens = count_completion_prompt(body["prompt"])
    except PromptShapeError as exc:
        raise RequestError(str(exc), param=prompt_param(api)) from exc
    if api == "responses":
        return SimRequest(
            api=api,
            model=model,
            stream=_bool(body, "stream", default=False),
            max_tokens=_max_tokens(body, default_max_tokens, "max_output_tokens"),
            prompt_tokens=prompt_tokens,
            include_usage=True,
            continuous_usage=False,
        )

    stream = _bool(body, "stream", default=False)
    _bool(body, "ignore_eos", default=False)
    max_tokens = _max_tokens(body, default_max_tokens)
    min_tokens = _int(body, "min_tokens", minimum=0)
    if min_tokens is not None and min_tokens > max_tokens:
        raise RequestError(
            f"min_tokens ({min_tokens}) must be less than or equal to max_tokens ({max_tokens})",
            param="min_tokens",
        )

    options = body.get("stream_options")
    if options is not None and not isinstance(options, Mapping):
        raise RequestError("stream_options must be an object", param="stream_options")
    include_usage = bool(options and _bool(options, "include_usage", default=False))
    # vLLM only reports continuous usage when the final usage is requested too.
    continuous = bool(include_usage and options and _bool(options, "continuous_usage_stats"))
    return SimRequest(
        api=api,
        model=model,
        stream=stream,
        max_tokens=max_tokens,
        prompt_tokens=prompt_tokens,
        include_usage=include_usage,
        continuous_usage=continuous,
        tool_call=_tool_call(body) if api == "chat" else None,
    )


def _tool_call(body: Mapping[str, object]) -> str | None:
    """The function a chat reply calls, or None. ``tools`` must be a list of objects; the
    names are those of ``{"type": "function", "function": {"name"}}`` entries (others are
    ignored, as a model would not call them). ``tool_choice`` as vLLM reads it: absent or
    ``"auto"``, one reply in ``TOOL_CALL_EVERY`` calls a function; ``"none"``, none does;
    ``"required"``, every reply calls one; ``{"type": "function", "function": {"name": N}}``,
    every reply calls N, which must be among the tools. A ``tool_choice`` without ``tools``
    is refused with vLLM's 400."""
    tools = body.get("tools")
    choice = body.get("tool_choice")
    if tools is None:
        if choice is not None:
            raise RequestError(
                "When using `tool_choice`, `tools` must be set.", param="tool_choice"
            )
        return None
    if not isinstance(tools, list) or not all(isinstance(t, Mapping) for t in tools):
        raise RequestError("tools must be a list of objects", param="tools")
    names = [
        fn["name"]
        for t in tools
        if t.get("type") == "function"
        and isinstance(fn := t.get("function"), Mapping)
        and isinstance(fn.get("name"), str)
        and fn["name"]
    ]
    forced = _forced_tool(choice, names)
    if forced is not None or not names or choice == "none":
        return forced
    digest = zlib.crc32(orjson.dumps(body.get("messages")))
    if digest % TOOL_CALL_EVERY and choice != "required":
        return None
    return str(names[digest // TOOL_CALL_EVERY % len(names)])


def _forced_tool(choice: object, names: list[str]) -> str | None:
    """The function a named ``tool_choice`` forces; None for the string choices."""
    if choice is None or choice in ("auto", "none", "required"):
        if choice == "required" and not names:
            raise RequestError(
                'tool_choice "required" needs at least one function tool', param="tool_choice"
            )
        return None
    fn = choice.get("function") if isinstance(choice, Mapping) else None
    name = fn.get("name") if isinstance(fn, Mapping) else None
    if not isinstance(choice, Mapping) or choice.get("type") != "function" or not name:
        raise RequestError(
            'tool_choice must be "none", "auto", "required" or '
            '{"type": "function", "function": {"name": ...}}',
            param="tool_choice",
        )
    if name not in names:
        raise RequestError(
            f"tool_choice names {name!r}, which is not in tools", param="tool_choice"
        )
    return str(name)


def prompt_param(api: str) -> str:
    """The body field that holds an ``api`` request's prompt (an error's ``param``)."""
    return {"chat": "messages", "completions": "prompt"}.get(api, "input")


def _count_input(value: object, *, image_tokens: int) -> int:
    """Prompt tokens of a Responses ``input``: a string, or a list of messages (or of
    strings)."""
    if isinstance(value, str):
        return count_words(value)
    if not isinstance(value, list) or not value:
        raise PromptShapeError("input must be a string or a non-empty list of messages")
    messages = [{"content": m} if isinstance(m, str) else m for m in value]
    return count_chat_prompt(messages, image_tokens=image_tokens)


def _embeddings(body: Mapping[str, object], model: str | None) -> SimRequest:
    value = body.get("input")
    try:
        if value is None or value == [] or value == "":
            raise PromptShapeError("input must be a non-empty string or list")
        prompt_tokens = count_completion_prompt(value)
    except PromptShapeError as exc:
        raise RequestError(str(exc).replace("prompt", "input"), param="input") from exc
    items = 1
    if isinstance(value, list) and not all(
        isinstance(x, int) and not isinstance(x, bool) for x in value
    ):
        items = len(value)
    dimensions = _int(body, "dimensions", minimum=1)
    if dimensions is not None and dimensions > 8192:
        raise RequestError("dimensions must be at most 8192", param="dimensions")
    return SimRequest(
        api="embeddings",
        model=model,
        stream=False,
        max_tokens=1,
        prompt_tokens=prompt_tokens,
        include_usage=False,
        continuous_usage=False,
        items=items,
        dimensions=dimensions or DEFAULT_DIMENSIONS,
    )


def _max_tokens(
    body: Mapping[str, object], default: int, name: str = "max_completion_tokens"
) -> int:
    value = _int(body, name, minimum=1)
    if value is None:
        value = _int(body, "max_tokens", minimum=1)
    return default if value is None else value


def _int(body: Mapping[str, object], name: str, *, minimum: int) -> int | None:
    value = body.get(name)
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise RequestError(f"{name} must be an integer >= {minimum}", param=name)
    return value


def _bool(body: Mapping[str, object], name: str, *, default: bool = False) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise RequestError(f"{name} must be a boolean", param=name)
    return value
