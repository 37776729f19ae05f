"""Tool calls end to end in miniature: the trace's ``tools`` (validated, sent in the chat
body), the simulator's streamed ``delta.tool_calls`` (OpenAI's shape), and the client's
count of tool-call chunks apart from content and reasoning, the same on the C walk and
the Python reference for every split of the stream."""

from __future__ import annotations

import random
import re

import orjson
import pyarrow as pa
import pytest
from feeds import IMPLS, fed, reference, split, stamps_for

from loadgen.errors import RequestError
from loadgen.openai.bodies import build_body
from loadgen.openai.chunks import Kind, chunk_kind, reply_text
from loadgen.sim.chunks import ResponseFormatter
from loadgen.sim.request import TOOL_CALL_EVERY, SimRequest, parse_request
from loadgen.sim.tokens import token_text
from traces import schema as s
from traces.prompts.maker import Prompt
from traces.runinfo import Capabilities
from traces.values import find_bad_value, tools_problem

TOOLS = [
    {"type": "function", "function": {"name": "read_file", "parameters": {"type": "object"}}},
    {"type": "function", "function": {"name": "run_tests"}},
]


def _stream(tool_call: str | None, chunks: int = 6, *, continuous: bool = True) -> bytes:
    """A whole simulated chat stream of ``chunks`` chunks of 3 tokens."""
    request = SimRequest(
        api="chat",
        model="m",
        stream=True,
        max_tokens=3 * chunks,
        prompt_tokens=5,
        include_usage=True,
        continuous_usage=continuous,
        tool_call=tool_call,
    )
    fmt = ResponseFormatter(request, model="m", request_id="r1")
    parts = [fmt.role_chunk() or b""]
    for i in range(chunks):
        parts.append(
            fmt.content_chunk(
                token_text(3 * i, 3), completion_tokens=3 * (i + 1), last=i == chunks - 1
            )
        )
    parts.append(fmt.done())
    return b"".join(parts)


def _deltas(stream: bytes) -> list[dict[str, object]]:
    out = []
    for line in stream.split(b"\n\n"):
        if line.startswith(b"data: {"):
            choices = orjson.loads(line[6:])["choices"]
            if choices:
                out.append(choices[0])
    return out


def test_the_simulator_streams_a_tool_call_in_openais_shape() -> None:
    choices = _deltas(_stream("read_file"))[1:]  # after the role chunk
    calls = [c["delta"]["tool_calls"][0] for c in choices]  # type: ignore[index]
    assert calls[0]["id"] == "call_r1"
    assert calls[0]["type"] == "function"
    assert calls[0]["function"]["name"] == "read_file"
    assert all(c["index"] == 0 and "id" not in c and "name" not in c["function"] for c in calls[1:])
    arguments = "".join(c["function"]["arguments"] for c in calls)
    assert orjson.loads(arguments) == {"input": token_text(0, 18)[1:]}
    assert len(arguments.split()) == 18  # a word a token, as the simulator counts them
    assert reply_text(_stream("read_file")) == arguments  # what a live history sends back
    assert [c["finish_reason"] for c in choices] == [None] * 5 + ["tool_calls"]
    assert all("content" not in c["delta"] for c in choices)  # type: ignore[operator]


@pytest.mark.parametrize("native", IMPLS)
@pytest.mark.parametrize("continuous", [True, False])
def test_tool_call_chunks_are_counted_apart_on_every_split(native: bool, continuous: bool) -> None:
    rng = random.Random(5)
    for tool in ("read_file", None):
        stream = _stream(tool, continuous=continuous)
        for _ in range(8):
            pieces = split(stream, [rng.randrange(len(stream)) for _ in range(rng.randint(0, 9))])
            stamps = stamps_for(pieces)
            got = fed(pieces, stamps, 10**9, native=native)
            assert got == reference(pieces, stamps, 10**9)
            assert len(got.content_offsets_us) == 6  # a tool call is output: TTFT, ITL
            assert got.reasoning_offsets_us == []
            if tool is None:
                assert (got.tool_call_chunks, got.first_tool_call_ns) == (0, None)
                assert got.finish_reason == "length"
            else:
                assert got.tool_call_chunks == 6
                assert got.first_tool_call_ns is not None
                assert got.first_tool_call_ns == got.first_token_ns
                assert got.finish_reason == "tool_calls"
            assert got.chunk_tokens == ([3] * 6 if continuous else None)


def test_a_delta_with_tool_calls_is_a_tool_call_whatever_its_content() -> None:
    def kind(delta: dict[str, object]) -> Kind:
        return chunk_kind({"choices": [{"delta": delta}]})[0]

    call = [{"index": 0, "function": {"arguments": "{"}}]
    assert kind({"tool_calls": call, "content": "hi"}) is Kind.TOOL_CALL
    assert kind({"tool_calls": call, "content": None}) is Kind.TOOL_CALL
    assert kind({"tool_calls": [], "content": "hi"}) is Kind.CONTENT
    assert kind({"tool_calls": None, "role": "assistant"}) is Kind.ROLE


def test_one_request_in_three_with_tools_gets_a_tool_call_by_its_messages() -> None:
    def answer(i: int, tools: object = TOOLS) -> str | None:
        body = {"messages": [{"role": "user", "content": f"task {i}"}], "tools": tools}
        return parse_request(body, api="chat", image_tokens=0, default_max_tokens=8).tool_call

    picked = [answer(i) for i in range(300)]
    assert picked == [answer(i) for i in range(300)]  # deterministic
    called = [p for p in picked if p is not None]
    assert 300 / TOOL_CALL_EVERY * 0.75 < len(called) < 300 / TOOL_CALL_EVERY * 1.25
    assert set(called) == {"read_file", "run_tests"}
    assert {answer(i, tools=None) for i in range(30)} == {None}
    assert {answer(i, tools=[{"type": "web_search"}]) for i in range(30)} == {None}


def test_tool_choice_forces_names_or_forbids_a_call_as_vllm_does() -> None:
    def answer(i: int, choice: object, tools: object = TOOLS) -> str | None:
        body = {
            "messages": [{"role": "user", "content": f"task {i}"}],
            "tools": tools,
            "tool_choice": choice,
        }
        return parse_request(body, api="chat", image_tokens=0, default_max_tokens=8).tool_call

    named = {"type": "function", "function": {"name": "run_tests"}}
    assert {answer(i, named) for i in range(30)} == {"run_tests"}
    assert {answer(i, "none") for i in range(30)} == {None}
    required = [answer(i, "required") for i in range(30)]
    assert set(required) == {"read_file", "run_tests"}  # every reply calls one
    assert [answer(i, "auto") for i in range(30)] == [answer(i, None) for i in range(30)]
    refusals = [
        ("auto", None, "When using `tool_choice`, `tools` must be set."),
        ({"type": "function", "function": {"name": "rm"}}, TOOLS, "'rm', which is not in tools"),
        ("sometimes", TOOLS, 'tool_choice must be "none", "auto", "required" or'),
        ("required", [{"type": "web_search"}], 'tool_choice "required" needs at least one'),
    ]
    for choice, tools, says in refusals:
        with pytest.raises(RequestError, match=re.escape(says)) as caught:
            answer(0, choice, tools)
        assert caught.value.param == "tool_choice"


def test_tools_are_validated_and_sent_in_chat_and_responses_bodies() -> None:
    text = orjson.dumps(TOOLS).decode()
    assert tools_problem(text) is None
    assert tools_problem("{}") == "must be a JSON array of tool objects, got a JSON object"
    assert tools_problem('[{"type": "function"}]') == (
        "tool 0: needs a function object with a non-empty string name"
    )
    assert tools_problem('[{"type": "x", "function": {"name": "f"}}]') == (
        'tool 0: "type" must be "function", got "x"'
    )
    table = pa.table({s.TOOLS: [text, None, "[1]"]})
    found = find_bad_value(table)
    assert found is not None
    assert (found.row, found.column) == (2, s.TOOLS)
    caps = Capabilities()

    def body(api: str) -> dict[str, object]:
        raw = build_body(
            api=api, model="m", prompt=Prompt(text="hi"), max_tokens=4, caps=caps, tools=text
        )
        return dict(orjson.loads(raw))

    assert body(s.API_CHAT)["tools"] == TOOLS
    assert body(s.API_RESPONSES)["tools"] == [
        {"type": "function", "name": "read_file", "parameters": {"type": "object"}},
        {"type": "function", "name": "run_tests"},
    ]
    assert "tools" not in body(s.API_COMPLETIONS)
