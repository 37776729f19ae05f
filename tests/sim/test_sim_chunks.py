"""vLLM-shaped response bodies."""

from __future__ import annotations

from typing import Any

import orjson

from loadgen.sim.chunks import DONE, ResponseFormatter, error_body, models_body
from loadgen.sim.engine import GroundTruth
from loadgen.sim.request import Api, SimRequest

_TRUTH = GroundTruth(
    queue_ms=0.0,
    prefill_ms=10.0,
    transfer_ms=0.0,
    first_token_ms=10.1,
    ttft_ms=20.1,
    decode_ms=40.0,
    completion_tokens=5,
    instance="r0",
)


def _request(api: Api = "chat", **kwargs: Any) -> SimRequest:
    fields: dict[str, Any] = {
        "api": api,
        "model": None,
        "stream": True,
        "max_tokens": 5,
        "prompt_tokens": 3,
        "include_usage": False,
        "continuous_usage": False,
    }
    fields.update(kwargs)
    return SimRequest(**fields)


def _decode(event: bytes | None) -> dict[str, Any]:
    assert event is not None
    assert event.startswith(b"data: ")
    assert event.endswith(b"\n\n")
    value = orjson.loads(event[len(b"data: ") : -2])
    assert isinstance(value, dict)
    return value


def test_chat_stream_shapes() -> None:
    fmt = ResponseFormatter(_request(), model="sim-model", request_id="abc")
    role = _decode(fmt.role_chunk())
    assert role["id"] == "chatcmpl-abc"
    assert role["object"] == "chat.completion.chunk"
    assert role["model"] == "sim-model"
    assert role["choices"] == [
        {
            "index": 0,
            "delta": {"role": "assistant", "content": ""},
            "logprobs": None,
            "finish_reason": None,
        }
    ]
    assert "usage" not in role
    content = _decode(fmt.content_chunk(" a b", completion_tokens=2, last=False))
    assert content["choices"][0]["delta"] == {"content": " a b"}
    assert content["choices"][0]["finish_reason"] is None
    assert "metrics" not in content
    last = _decode(fmt.content_chunk(" c", completion_tokens=5, last=True, truth=_TRUTH))
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["metrics"]["ttft_ms"] == 20.1
    assert DONE == b"data: [DONE]\n\n"


def test_usage_chunk_has_no_choices_and_carries_the_truth() -> None:
    fmt = ResponseFormatter(_request(include_usage=True), model="m", request_id="x")
    usage = _decode(fmt.usage_chunk(completion_tokens=5, truth=_TRUTH))
    assert usage["choices"] == []
    assert usage["usage"] == {
        "prompt_tokens": 3,
        "completion_tokens": 5,
        "total_tokens": 8,
        "prompt_tokens_details": {"cached_tokens": 0},
    }
    metrics = usage["metrics"]
    assert set(metrics) >= {
        "queue_ms", "prefill_ms", "transfer_ms", "decode_wait_ms", "first_token_ms", "ttft_ms",
        "decode_ms",
        "instance", "time_to_first_token_ms", "queue_time_ms", "generation_time_ms",
        "mean_itl_ms", "tokens_per_second",
    }  # fmt: skip
    assert metrics["instance"] == "r0"
    assert metrics["mean_itl_ms"] == 10.0
    parts = ("queue_ms", "prefill_ms", "transfer_ms", "decode_wait_ms", "first_token_ms")
    assert abs(sum(metrics[k] for k in parts) - metrics["ttft_ms"]) < 1e-9


def test_continuous_usage_is_cumulative_on_every_chunk() -> None:
    request = _request(include_usage=True, continuous_usage=True)
    fmt = ResponseFormatter(request, model="m", request_id="x")
    assert _decode(fmt.role_chunk())["usage"]["completion_tokens"] == 0
    chunk = _decode(fmt.content_chunk(" a b", completion_tokens=2, last=False))
    assert chunk["usage"] == {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}


def test_completions_stream_shapes() -> None:
    fmt = ResponseFormatter(_request("completions"), model="m", request_id="q")
    assert fmt.role_chunk() is None
    chunk = _decode(fmt.content_chunk(" a", completion_tokens=1, last=False))
    assert chunk["id"] == "cmpl-q"
    assert chunk["object"] == "text_completion"
    assert chunk["choices"][0]["text"] == " a"
    assert chunk["usage"] is None


def test_full_responses() -> None:
    chat = ResponseFormatter(_request(stream=False), model="m", request_id="q")
    body = orjson.loads(chat.full_response(" a b", completion_tokens=2, truth=_TRUTH))
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"] == " a b"
    assert body["choices"][0]["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 2
    assert body["metrics"]["decode_ms"] == 40.0
    completions = ResponseFormatter(
        _request("completions", stream=False), model="m", request_id="q"
    )
    body = orjson.loads(completions.full_response(" a", completion_tokens=1, truth=_TRUTH))
    assert body["object"] == "text_completion"
    assert body["choices"][0]["text"] == " a"


def test_error_and_models_bodies() -> None:
    error = orjson.loads(error_body("nope", kind="BadRequestError", code=400))
    assert error == {
        "error": {"message": "nope", "type": "BadRequestError", "param": None, "code": 400}
    }
    models = orjson.loads(models_body("sim-model", created=1))
    assert models["object"] == "list"
    assert [card["id"] for card in models["data"]] == ["sim-model"]
