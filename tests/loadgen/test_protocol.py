"""Request bodies and chunk classification on shapes servers really send.

Each classification case also goes through ``EventFeed`` on both implementations (the C
walk and the reference, ``StreamState.add``), checked against ``summarize_stream``.
"""

from __future__ import annotations

import json

import orjson
import pytest
from feeds import IMPLS, fed_events

from loadgen.openai.bodies import build_body, endpoint_path
from loadgen.openai.chunks import Kind, classify
from loadgen.stream.state import summarize_stream
from traces.prompts.maker import Prompt
from traces.runinfo import Capabilities


def test_chat_body_with_all_extras() -> None:
    body = orjson.loads(
        build_body(
            api="chat", model="m", prompt=Prompt(text="hi there"), max_tokens=7, caps=Capabilities()
        )
    )
    assert body["messages"] == [{"role": "user", "content": "hi there"}]
    assert body["stream"] is True
    assert body["max_tokens"] == 7
    assert body["min_tokens"] == 7
    assert body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_completions_body_without_extras() -> None:
    caps = Capabilities().without_extras()
    body = orjson.loads(
        build_body(api="completions", model="m", prompt=Prompt(text="abc"), max_tokens=3, caps=caps)
    )
    assert body["prompt"] == "abc"
    assert "ignore_eos" not in body
    assert "min_tokens" not in body
    assert body["stream_options"] == {"include_usage": True}
    assert endpoint_path("completions") == "/completions"
    assert endpoint_path("chat") == "/chat/completions"


def test_images_become_content_parts() -> None:
    prompt = Prompt(text="describe", images=("data:image/png;base64,AAAA",))
    body = orjson.loads(
        build_body(api="chat", model="m", prompt=prompt, max_tokens=1, caps=Capabilities())
    )
    parts = body["messages"][0]["content"]
    assert parts[0] == {"type": "text", "text": "describe"}
    assert parts[1] == {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}


def test_literal_messages_are_sent_as_given() -> None:
    msgs = '[{"role":"system","content":"s"},{"role":"user","content":"u"}]'
    body = orjson.loads(
        build_body(
            api="chat",
            model="m",
            prompt=Prompt(messages_json=msgs),
            max_tokens=1,
            caps=Capabilities(),
        )
    )
    assert body["messages"] == orjson.loads(msgs)


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize(
    ("payload", "kind"),
    [
        (b'{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}', Kind.ROLE),
        (b'{"choices":[{"index":0,"delta":{"content":" hi"}}]}', Kind.CONTENT),
        (b'{"choices":[{"index":0,"delta":{"reasoning_content":"think"}}]}', Kind.REASONING),
        (b'{"choices":[{"index":0,"delta":{"reasoning":"think"}}]}', Kind.REASONING),
        (b'{"choices":[{"index":0,"text":" hi","finish_reason":null}]}', Kind.CONTENT),
        (b'{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}', Kind.OTHER),
        (b'{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2}}', Kind.USAGE),
        (b"[DONE]", Kind.DONE),
        (b'{"error":{"message":"boom"}}', Kind.ERROR),
    ],
)
def test_classify_kinds(payload: bytes, kind: Kind, native: bool) -> None:
    assert classify(payload).kind is kind
    summary = fed_events([payload], native=native)
    assert len(summary.content_offsets_us) == (kind is Kind.CONTENT)
    assert len(summary.reasoning_offsets_us) == (kind is Kind.REASONING)
    assert summary.done == (kind is Kind.DONE)
    assert (summary.error is not None) == (kind is Kind.ERROR)
    assert (summary.usage is not None) == (kind is Kind.USAGE)


@pytest.mark.parametrize("native", IMPLS)
def test_usage_with_cached_tokens_and_finish_reason(native: bool) -> None:
    payload = (
        b'{"choices":[{"index":0,"delta":{"content":"x"},"finish_reason":"length"}],'
        b'"usage":{"prompt_tokens":10,"completion_tokens":3,"total_tokens":13,'
        b'"prompt_tokens_details":{"cached_tokens":8}}}'
    )
    chunk = classify(payload)
    assert chunk.kind is Kind.CONTENT
    assert chunk.finish_reason == "length"
    assert chunk.usage is not None
    assert (
        chunk.usage.prompt_tokens,
        chunk.usage.completion_tokens,
        chunk.usage.cached_tokens,
    ) == (10, 3, 8)
    summary = fed_events([payload], native=native)
    assert (summary.usage, summary.finish_reason) == (chunk.usage, "length")
    assert summary.chunk_tokens == [3]


@pytest.mark.parametrize("native", IMPLS)
def test_llama_cpp_timings_are_read(native: bool) -> None:
    payload = (
        b'{"choices":[{"index":0,"delta":{},"finish_reason":"length"}],'
        b'"timings":{"prompt_n":16,"prompt_ms":12.5,"predicted_n":4,"predicted_ms":40.0,"cache_n":0}}'
    )
    chunk = classify(payload)
    assert chunk.timings is not None
    assert chunk.timings.prefill_ms == 12.5
    assert chunk.timings.decode_ms == 40.0
    assert fed_events([payload], native=native).timings == chunk.timings


@pytest.mark.parametrize("native", IMPLS)
def test_malformed_json_raises_value_error(native: bool) -> None:
    with pytest.raises(ValueError, match="malformed"):
        classify(b'{"choices": [')
    summary = fed_events(
        [b'{"choices": [', b'{"choices":[{"delta":{"content":"x"}}]}'], native=native
    )
    assert summary.error is not None
    assert summary.error.startswith("malformed chunk")
    assert len(summary.content_offsets_us) == 1  # a bad chunk does not end the stream


def _vllm_stream(api: str, n: int, *, usage_every_chunk: bool, reasoning: int = 0) -> list[bytes]:
    """A realistic compact stream; each chunk as vLLM serialises it."""
    out: list[dict[str, object]] = []

    def usage(k: int) -> dict[str, int]:
        return {"prompt_tokens": 5, "completion_tokens": k, "total_tokens": 5 + k}

    if api == "chat":
        out.append(
            {
                "id": "c",
                "choices": [
                    {
                        "index": 0,
                        "delta": {"role": "assistant", "content": ""},
                        "logprobs": None,
                        "finish_reason": None,
                    }
                ],
            }
        )
    for k in range(1, reasoning + n + 1):
        last = k == reasoning + n
        if api == "chat":
            delta = {"reasoning_content": "hm"} if k <= reasoning else {"content": f" t{k}"}
            choice: dict[str, object] = {
                "index": 0,
                "delta": delta,
                "logprobs": None,
                "finish_reason": "length" if last else None,
            }
        else:
            choice = {
                "index": 0,
                "text": f" t{k}",
                "logprobs": None,
                "finish_reason": "length" if last else None,
                "stop_reason": None,
            }
        chunk: dict[str, object] = {"id": "c", "choices": [choice]}
        if usage_every_chunk:
            chunk["usage"] = usage(k)
        out.append(chunk)
    out.append(
        {
            "id": "c",
            "choices": [],
            "usage": usage(reasoning + n),
            "metrics": {"queue_ms": 1.0, "prefill_ms": 2.0, "first_token_ms": 0.5},
        }
    )
    return [orjson.dumps(c) for c in out] + [b"[DONE]"]


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.parametrize("usage_every_chunk", [True, False])
@pytest.mark.parametrize("reasoning", [0, 3])
def test_fast_path_equals_full_decode(
    api: str, usage_every_chunk: bool, reasoning: int, native: bool
) -> None:
    compact = _vllm_stream(
        api, 6, usage_every_chunk=usage_every_chunk, reasoning=reasoning if api == "chat" else 0
    )
    # The same chunks with spaces after separators never take the byte-level fast path.
    spaced = [p if p == b"[DONE]" else json.dumps(orjson.loads(p)).encode() for p in compact]
    events_a = [(1000 * (i + 1), p) for i, p in enumerate(compact)]
    events_b = [(1000 * (i + 1), p) for i, p in enumerate(spaced)]
    fast, full = summarize_stream(events_a, 0), summarize_stream(events_b, 0)
    assert fast == full
    assert len(fast.content_offsets_us) == 6
    assert fast.chunk_tokens == ([1] * 6 if usage_every_chunk else None)
    assert fast.finish_reason == "length"
    assert fast.done
    assert fast.timings is not None
    assert fast.timings.prefill_ms == 2.0
    # The feed (fed_events checks it against summarize_stream) on both layouts.
    assert fed_events(compact, native=native) == fed_events(spaced, native=native)
