"""Parsing OpenAI request bodies into SimRequest."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.errors import RequestError
from loadgen.sim.request import SimRequest, parse_request


def _parse(body: object, api: str = "chat") -> SimRequest:
    assert api in ("chat", "completions", "responses", "embeddings")
    return parse_request(body, api=api, image_tokens=10, default_max_tokens=16)  # type: ignore[arg-type]


_CHAT: dict[str, Any] = {"messages": [{"role": "user", "content": "a b c"}]}


def test_defaults() -> None:
    request = _parse(_CHAT)
    assert request == SimRequest(
        api="chat",
        model=None,
        stream=False,
        max_tokens=16,
        prompt_tokens=3,
        include_usage=False,
        continuous_usage=False,
    )


def test_max_completion_tokens_wins_over_max_tokens() -> None:
    assert _parse({**_CHAT, "max_tokens": 5}).max_tokens == 5
    assert _parse({**_CHAT, "max_tokens": 5, "max_completion_tokens": 7}).max_tokens == 7


def test_stream_options() -> None:
    body = {**_CHAT, "stream": True, "stream_options": {"include_usage": True}}
    request = _parse(body)
    assert request.stream
    assert request.include_usage
    assert not request.continuous_usage
    body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
    assert _parse(body).continuous_usage
    # vLLM reports continuous usage only together with the final usage.
    body["stream_options"] = {"continuous_usage_stats": True}
    assert not _parse(body).continuous_usage


def test_accepts_ignore_eos_and_min_tokens() -> None:
    request = _parse({**_CHAT, "max_tokens": 8, "min_tokens": 8, "ignore_eos": True})
    assert request.max_tokens == 8


def test_completions_prompt() -> None:
    request = _parse({"prompt": ["a b", "c"], "model": "m"}, api="completions")
    assert (request.api, request.prompt_tokens, request.model) == ("completions", 3, "m")


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ([], None),
        ({**_CHAT, "max_tokens": 0}, "max_tokens"),
        ({**_CHAT, "max_tokens": "5"}, "max_tokens"),
        ({**_CHAT, "max_tokens": True}, "max_tokens"),
        ({**_CHAT, "max_tokens": 4, "min_tokens": 5}, "min_tokens"),
        ({**_CHAT, "stream": "yes"}, "stream"),
        ({**_CHAT, "stream_options": []}, "stream_options"),
        ({**_CHAT, "model": 3}, "model"),
        ({"messages": "hi"}, "messages"),
    ],
)
def test_rejects_bad_bodies(body: object, param: str | None) -> None:
    with pytest.raises(RequestError) as info:
        _parse(body)
    assert info.value.param == param


def test_completions_requires_a_prompt() -> None:
    with pytest.raises(RequestError, match="prompt is required"):
        _parse({"max_tokens": 3}, api="completions")


def test_a_responses_request_reads_input_and_max_output_tokens() -> None:
    text = _parse({"input": "a b c d", "max_output_tokens": 5, "stream": True}, "responses")
    assert (text.prompt_tokens, text.max_tokens, text.stream) == (4, 5, True)
    assert text.include_usage  # usage always rides on response.completed
    parts = [{"type": "input_text", "text": "a b"}, {"type": "input_image", "image_url": "x"}]
    messages = _parse({"input": [{"role": "user", "content": parts}, "c"]}, "responses")
    assert (messages.prompt_tokens, messages.max_tokens) == (2 + 10 + 1, 16)
    with pytest.raises(RequestError) as err:
        _parse({"input": 3}, "responses")
    assert err.value.param == "input"


def test_an_embeddings_request_counts_its_items_and_runs_one_step() -> None:
    batch = _parse({"input": ["a b", "c", "d e f"], "dimensions": 4}, "embeddings")
    assert (batch.items, batch.prompt_tokens, batch.max_tokens, batch.dimensions) == (3, 6, 1, 4)
    assert not batch.stream
    assert _parse({"input": [1, 2, 3]}, "embeddings").items == 1  # one list of token ids
    assert _parse({"input": "a b"}, "embeddings").items == 1
    bads: list[dict[str, Any]] = [{"input": []}, {"input": ""}, {}, {"input": [{"x": 1}]}]
    for bad in bads:
        with pytest.raises(RequestError) as err:
            _parse(bad, "embeddings")
        assert err.value.param == "input"
