"""The context limit: a request whose prompt, or prompt plus ``max_tokens``, exceeds the
model's context is refused before it is queued, with vLLM's 400 and vLLM's wording
(``serving_engine`` input validation), so the replay records ``context_exceeded``.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations


def context_refusal(
    *, prompt_tokens: int, max_tokens: int, max_model_len: int | None
) -> str | None:
    """vLLM's 400 message when the request does not fit ``max_model_len`` tokens, else None
    (also None without a limit)."""
    if max_model_len is None:
        return None
    if prompt_tokens > max_model_len:
        return (
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"request has {prompt_tokens} input tokens. Please reduce the length of the "
            "input messages."
        )
    if prompt_tokens + max_tokens > max_model_len:
        return (
            f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
            f"model's maximum context length is {max_model_len} tokens and your request has "
            f"{prompt_tokens} input tokens ({max_tokens} > {max_model_len} - {prompt_tokens})."
        )
    return None
