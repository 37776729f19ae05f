"""The look-ahead's bounds: one request is always prepared when none waits; beyond that,
only within the count, the bytes and the guard before the earliest due time."""

from __future__ import annotations

import time

import httpx
import pytest

from loadgen import lookahead
from loadgen.client import PreparedRequest, ReadyRequest
from loadgen.http.stamping import Progress
from loadgen.lookahead import PREP_GUARD_NS, Lookahead
from traces.records import TraceRequest

NOW = 1_000_000_000
FAR = NOW + 10 * PREP_GUARD_NS


def ready(index: int, size: int = 10) -> ReadyRequest:
    trace = TraceRequest(
        index=index, request_id=f"r{index}", arrival_s=0.0, input_tokens=4, output_tokens=1
    )
    job = PreparedRequest(
        trace=trace, x_request_id=f"x{index}", path="/v1/chat/completions", body=b"x" * size
    )
    return ReadyRequest(
        job=job,
        send=httpx.Request("POST", "http://server.invalid/v1/chat/completions"),
        progress=Progress(time.perf_counter_ns),
    )


def test_pops_in_order_and_counts_the_bytes_it_holds() -> None:
    ahead = Lookahead()
    assert not ahead
    assert not ahead.due(NOW)
    ahead.add(FAR, 0, ready(0, 10))
    ahead.add(FAR + 1, 1, ready(1, 25))
    assert len(ahead) == 2
    assert ahead.held_bytes == 35
    assert ahead.next_due() == FAR
    assert not ahead.due(FAR - 1)
    assert ahead.due(FAR)
    due, position, job = ahead.pop()
    assert (due, position, job.job.trace.index) == (FAR, 0, 0)
    assert ahead.held_bytes == 25
    ahead.pop()
    assert ahead.held_bytes == 0
    assert not ahead


def test_room_while_the_earliest_is_beyond_the_guard() -> None:
    ahead = Lookahead()
    assert ahead.room(NOW)  # none waits: always
    ahead.add(NOW + PREP_GUARD_NS + 1, 0, ready(0))
    assert ahead.room(NOW)
    assert not ahead.room(NOW + 1)  # the earliest is due within the guard now
    assert not ahead.room(NOW + 2 * PREP_GUARD_NS)  # or overdue


def test_room_up_to_the_count(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lookahead, "AHEAD_REQUESTS", 3)
    ahead = Lookahead()
    for k in range(3):
        assert ahead.room(NOW)
        ahead.add(FAR + k, k, ready(k))
    assert not ahead.room(NOW)
    ahead.pop()
    assert ahead.room(NOW)


def test_room_up_to_the_bytes_but_one_request_always(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lookahead, "AHEAD_BYTES", 100)
    ahead = Lookahead()
    ahead.add(FAR, 0, ready(0, 60))
    assert ahead.room(NOW)
    ahead.add(FAR + 1, 1, ready(1, 60))  # now past the bound
    assert not ahead.room(NOW)
    ahead.pop()
    assert ahead.room(NOW)  # 60 bytes held: under it again
    ahead.pop()
    huge = Lookahead()
    huge.add(FAR, 0, ready(0, 1000))  # one body over the bound still goes out
    assert not huge.room(NOW)
    huge.pop()
    assert huge.room(NOW)
