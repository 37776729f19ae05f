"""Prompt token counting and generated token text: the simulator's stand-in for a tokenizer.

One token is one whitespace-separated word. Counting is deliberately simple and exact so that
tests and the replay harness can predict ``usage.prompt_tokens`` without a tokenizer:

- completions ``prompt``: a string counts its words; a list of strings sums them; a list of
  integers is a token-id list and counts its length; a list of such lists sums them.
- chat ``messages``: the sum over messages of the words of string ``content``, or of the
  ``text`` of each ``{"type": "text"}`` content part; each ``image_url`` (or ``image``) part
  counts ``image_tokens``; other parts count 0. No chat-template overhead is added. The
  Responses API's ``input_text`` and ``input_image`` parts count as ``text`` and images.

Generated text is one deterministic word with a leading space per token, a pure function of
the token's index in the completion.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from collections.abc import Mapping

from loadgen.errors import PromptShapeError

_WORDS: tuple[str, ...] = (
    "the", "model", "token", "stream", "of", "latency", "serves", "a", "batch", "fast",
    "cache", "prefill", "decode", "and", "every", "request", "waits", "in", "queue", "then",
    "reads", "weights", "from", "memory", "writes", "keys", "values", "to", "blocks", "while",
    "the", "scheduler", "admits", "new", "work", "each", "step", "emits", "one", "word",
)  # fmt: skip
# Precomputed " word" strings: generating text is a hot path (one call per chunk).
_TOKENS: tuple[str, ...] = tuple(
    " " + _WORDS[(i * 7 + i // len(_WORDS)) % len(_WORDS)] for i in range(997)
)


def token_text(start: int, count: int) -> str:
    """The text of ``count`` generated tokens starting at token index ``start`` (0-based)."""
    n = len(_TOKENS)
    return "".join(_TOKENS[i % n] for i in range(start, start + count))


def count_words(text: str) -> int:
    """Whitespace-separated word count of ``text``."""
    return len(text.split())


def count_completion_prompt(prompt: object) -> int:
    """Prompt tokens of a completions request's ``prompt`` (see the module docstring)."""
    if isinstance(prompt, str):
        return count_words(prompt)
    if isinstance(prompt, list):
        if all(isinstance(item, int) and not isinstance(item, bool) for item in prompt):
            return len(prompt)
        total = 0
        for item in prompt:
            if isinstance(item, str):
                total += count_words(item)
            elif isinstance(item, list) and all(
                isinstance(tok, int) and not isinstance(tok, bool) for tok in item
            ):
                total += len(item)
            else:
                raise PromptShapeError("prompt must be a string, a list of strings or token ids")
        return total
    raise PromptShapeError("prompt must be a string, a list of strings or token ids")


def count_chat_prompt(messages: object, *, image_tokens: int) -> int:
    """Prompt tokens of a chat request's ``messages`` (see the module docstring)."""
    if not isinstance(messages, list) or not messages:
        raise PromptShapeError("messages must be a non-empty list")
    total = 0
    for message in messages:
        if not isinstance(message, Mapping):
            raise PromptShapeError("each message must be an object")
        content = message.get("content")
        if content is None:
            continue
        if isinstance(content, str):
            total += count_words(content)
        elif isinstance(content, list):
            total += _count_parts(content, image_tokens=image_tokens)
        else:
            raise PromptShapeError("message content must be a string or a list of parts")
    return total


def _count_parts(parts: list[object], *, image_tokens: int) -> int:
    total = 0
    for part in parts:
        if isinstance(part, str):
            total += count_words(part)
            continue
        if not isinstance(part, Mapping):
            raise PromptShapeError("each content part must be an object")
        kind = part.get("type")
        if kind in ("text", "input_text"):
            text = part.get("text")
            if not isinstance(text, str):
                raise PromptShapeError("a text content part needs a string 'text'")
            total += count_words(text)
        elif kind in ("image_url", "image", "input_image"):
            total += image_tokens
    return total
