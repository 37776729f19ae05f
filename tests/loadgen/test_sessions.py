"""Closed-loop session planning (``loadgen.sessions``): parents, session openers, the due
time of a turn, the prompt a turn carries over, entering sessions at an offset."""

from __future__ import annotations

import dataclasses
import json

from loadgen.history import LiveHistory
from loadgen.openai.chunks import reply_text
from loadgen.run.sharding import select_shard
from loadgen.sessions import NONE, enter_sessions, plan_sessions, shared_tokens, turn_due
from traces.prompts.maker import PromptMaker
from traces.records import TraceRequest


def _req(
    i: int,
    t: float,
    session: str | None = None,
    parent: str | None = None,
    blocks: tuple[int, ...] = (),
    think: float | None = None,
    branch: str | None = None,
) -> TraceRequest:
    return TraceRequest(
        index=i,
        request_id=f"r{i}",
        arrival_s=t,
        input_tokens=max(1, 4 * len(blocks)),
        output_tokens=2,
        prefix_blocks=blocks or None,
        session_id=session,
        parent=parent,
        branch=branch,
        think_s=think,
    )


def test_plan_follows_parents_and_infers_them_from_sessions() -> None:
    requests = [
        _req(0, 0.0, "a", blocks=(1, 2)),
        _req(1, 0.5),  # no session: open loop
        _req(2, 1.0, "a", "r0", blocks=(1, 2, 3), think=0.25),
        _req(3, 1.5, "a.1", "r2", blocks=(1, 2, 3, 4), think=0.5, branch="fork"),
        _req(4, 2.0, "b"),
        _req(5, 2.5, "b"),  # no parent column: the session's previous request
        _req(6, 3.0, "c", "gone"),  # a parent not in this replay: sent at its trace time
    ]
    plan = plan_sessions(requests, time_factor=2.0, block_size=4)
    assert plan.waits_for == (NONE, NONE, 0, 2, NONE, 4, NONE)
    assert plan.followers[0] == (2,)
    assert plan.followers[2] == (3,)
    assert plan.think_ns[2] == 500_000_000  # scaled by the time factor
    assert plan.opens == (True, False, False, True, True, False, True)
    assert plan.session_rows == (2, 1, 2, 1)
    assert plan.context_tokens[2] == 8
    assert plan.context_tokens[3] == 12
    assert plan.context_tokens[0] is None


def test_shared_tokens_is_the_common_block_prefix_capped_by_input() -> None:
    parent = _req(0, 0.0, blocks=(1, 2, 3, 4))
    assert shared_tokens(_req(1, 0.0, blocks=(1, 2, 9)), parent, 4) == 8
    assert shared_tokens(_req(1, 0.0, blocks=(7,)), parent, 4) == 0
    assert shared_tokens(_req(1, 0.0, blocks=(1, 2, 3, 4, 5)), parent, 4) == 16


def test_turn_is_due_at_the_later_of_trace_time_and_parent_end_plus_think() -> None:
    assert turn_due(100, 50, 20) == 100
    assert turn_due(100, 90, 20) == 110


def test_enter_sessions_cuts_each_session_and_keeps_its_start() -> None:
    requests = [
        _req(0, 0.0, "a"),
        _req(1, 1.0, "b"),
        _req(2, 2.0, "a"),
        _req(3, 3.0),
        _req(4, 5.0, "a"),
        _req(5, 5.5, "b"),
    ]
    kept = enter_sessions(requests, 2.0)
    # a: turns at 2.0 and 5.0 kept, moved back by 2.0; b: 5.5 kept, moved back by 4.5.
    assert [(r.request_id, r.arrival_s) for r in kept] == [
        ("r2", 0.0),
        ("r5", 1.0),
        ("r3", 3.0),
        ("r4", 3.0),
    ]
    assert [r.index for r in kept] == [2, 5, 3, 4]
    assert enter_sessions(requests, 0.0) == requests


def test_sub_agents_go_to_the_shard_of_the_session_they_branched_from() -> None:
    requests = [_req(k, 0.0, f"s{k}") for k in range(8)]
    requests += [_req(8 + k, 1.0, f"s{k}.1", f"r{k}", branch="fork") for k in range(8)]
    requests += [_req(16 + k, 2.0, f"s{k}.1", f"r{8 + k}") for k in range(8)]
    for shard in range(3):
        mine = select_shard(requests, shard, 3)
        ids = {r.request_id for r in mine}
        assert all(r.parent in ids for r in mine if r.parent is not None)
    assert sum(len(select_shard(requests, k, 3)) for k in range(3)) == len(requests)


def test_live_history_sends_the_parent_messages_and_its_reply() -> None:
    requests = [
        _req(0, 0.0, "s", blocks=(1, 2)),  # 8 tokens, 2 out
        dataclasses.replace(_req(1, 1.0, "s", "r0", blocks=(1, 2, 3, 4)), input_tokens=15),
        _req(2, 2.0, "s.1", "r1", blocks=(1, 2, 3, 4, 5), branch="fork"),
        _req(3, 2.0, "s.2", "r1", blocks=(1, 9), branch="spawn"),
    ]
    plan = plan_sessions(requests, time_factor=1.0, block_size=4)
    history = LiveHistory(PromptMaker(block_size=4), plan)
    assert history.keeps_reply(0)
    assert history.keeps_reply(1)
    assert not history.keeps_reply(2)

    def sent(position: int, reply: str | None) -> list[dict[str, str]]:
        req = history.request(requests, position, reply)
        assert req.messages is not None
        messages: list[dict[str, str]] = json.loads(req.messages)
        return messages

    first = sent(0, None)
    assert [m["role"] for m in first] == ["user"]
    assert len(first[0]["content"].split()) == 8
    second = sent(1, "the reply")
    assert second[:2] == [*first, {"role": "assistant", "content": "the reply"}]
    assert len(second[2]["content"].split()) == 15 - 8 - 2  # the turn's own part
    fork = sent(2, "second reply")
    assert fork[:4] == [*second, {"role": "assistant", "content": "second reply"}]
    spawn = sent(3, "second reply")
    assert [m["role"] for m in spawn] == ["user"]  # fresh: no history


def test_reply_text_joins_the_content_of_a_stream() -> None:
    body = (
        b'data: {"choices":[{"delta":{"role":"assistant"}}]}\n\n'
        b'data: {"choices":[{"delta":{"content":"Hello"}}]}\r\n\r\n'
        b"data: not json\n\n"
        b'data: {"choices":[{"delta":{"content":" world"}}],"usage":null}\n\n'
        b'data: {"choices":[],"usage":{"completion_tokens":2}}\n\n'
        b"data: [DONE]\n\n"
    )
    assert reply_text(body) == "Hello world"
    assert reply_text(b'data: {"choices":[{"text":"plain"}]}\n\n') == "plain"
