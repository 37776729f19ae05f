"""What an error response says about the request: a prompt longer than the model's context,
or a refusal by admission control.

Servers refuse such a prompt with HTTP 400 and a message of their own; the record keeps it
apart from other HTTP errors (outcome ``context_exceeded``), since it is the workload's
fault, not the server's. A 429/503 whose message says admission control (or overload)
refused it on arrival is outcome ``rejected``: the server's load policy. Pure: the status
and the error text ``loadgen.client`` extracted (the OpenAI ``error.message``) in, a yes or
no out.
"""

from __future__ import annotations

from typing import Final

CONTEXT_EXCEEDED_MARKERS: Final = (
    # vLLM ("This model's maximum context length is 2048 tokens. However, your prompt
    # contains at least 2049 input tokens ...") and OpenAI's own API.
    "maximum context length",
    # OpenAI's error code, where a server puts it in the message.
    "context_length_exceeded",
    # llama.cpp's llama-server ("request (9000 tokens) exceeds the available context size
    # (8192 tokens) ...").
    "exceeds the available context size",
    # SGLang ("The input (N tokens) is longer than the model's context length (M tokens).").
    "longer than the model's context length",
)
"""Lower-case phrases of the servers' messages for a prompt over the context length."""

CONTEXT_EXCEEDED_STATUSES: Final = (400, 413)


def is_context_exceeded(status: int | None, message: str) -> bool:
    """True when an error response refuses the prompt for its length (status 400 or 413
    and one of the known messages)."""
    if status not in CONTEXT_EXCEEDED_STATUSES:
        return False
    text = message.lower()
    return any(marker in text for marker in CONTEXT_EXCEEDED_MARKERS)


ADMISSION_MARKERS: Final = (
    # llm-loadgen's simulator ("request rejected by admission control: estimated ...").
    (429, "rejected by admission control"),
    (503, "rejected by admission control"),
    # Hugging Face TGI's queue limit (OverloadedError: 429 "Model is overloaded").
    (429, "model is overloaded"),
)
"""Statuses and lower-case phrases of the servers' refusals of a request, on arrival, for
load."""


def is_admission_rejected(status: int | None, message: str) -> bool:
    """True when an error response refuses the request on arrival for load (one of the
    known status and message pairs): outcome ``rejected``."""
    text = message.lower()
    return any(status == code and marker in text for code, marker in ADMISSION_MARKERS)
