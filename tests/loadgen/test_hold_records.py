"""An open loop's look-ahead, request tasks and records: in its slack the loop prepares the
requests due next, as many as ``loadgen.lookahead`` allows, so a backlog goes out without
being prepared first; behind its schedule, the loop holds finished requests' records back
(``StreamingClient.hold_records``) and lets them go once it wakes on time again, every
record still reaching the sink; a request task that raises (none should: ``execute``
records every failure as a row) fails the run."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import httpx
import pytest
from scripted import response, scripted_server

from loadgen.client import PreparedRequest, ReadyRequest, StreamingClient
from loadgen.clock import Clock
from loadgen.live import LiveStats
from loadgen.lookahead import AHEAD_REQUESTS
from loadgen.prepare.preparer import Preparer
from loadgen.replay import LoadShape, Replayer
from loadgen.run.session import make_transport
from traces.prompts.maker import PromptMaker
from traces.records import RunRow, TraceRequest
from traces.runinfo import Capabilities

SSE = (
    b'data: {"choices":[{"index":0,"delta":{"content":" a"}}]}\n\n'
    b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}\n\n'
    b"data: [DONE]\n\n"
)
pytestmark = pytest.mark.serial

BURST = 300
"""Requests all due at the start: the loop cannot send them within a millisecond."""


class HoldLog(StreamingClient):
    """The client, noting each ``hold_records`` the replay makes and how many records
    were waiting then."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.holds: list[tuple[bool, int]] = []

    def hold_records(self, held: bool) -> None:
        self.holds.append((held, self.deferred))
        super().hold_records(held)


async def replay(
    arrivals: list[float], client_type: type[HoldLog] = HoldLog
) -> tuple[list[RunRow], HoldLog]:
    clock = Clock()
    requests = [
        TraceRequest(index=i, request_id=f"q{i}", arrival_s=at, input_tokens=4, output_tokens=1)
        for i, at in enumerate(arrivals)
    ]
    records: list[RunRow] = []
    async with scripted_server([response(SSE)] * len(requests)) as (url, log):
        transport = make_transport("fast", clock.now_ns, max_connections=0)
        async with httpx.AsyncClient(transport=transport, timeout=5.0) as http:
            client = client_type(
                http,
                base_url=url + "/v1",
                now_ns=clock.now_ns,
                run_id="t",
                transport=transport,
                defer_records=True,
            )
            preparer = Preparer(
                prompts=PromptMaker(), model="m", run_id="t", capabilities=Capabilities()
            )
            await Replayer(
                requests=requests,
                shape=LoadShape(),
                client=client,
                preparer=preparer,
                sink=records.append,
                stats=LiveStats(clock.now_ns),
                clock=clock,
            ).run()
        await asyncio.wait_for(log.idle.wait(), timeout=5.0)
    return records, client


def test_the_slack_before_a_burst_prepares_all_of_it() -> None:
    class ReadyLog(HoldLog):
        """The client, noting when each request was encoded and when it was sent."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.readied: dict[int, int] = {}
            self.sent: dict[int, int] = {}

        def ready(self, job: PreparedRequest) -> ReadyRequest:
            self.readied[job.trace.index] = time.perf_counter_ns()
            return super().ready(job)

        async def execute(self, job: Any, due_ns: int, sink: Any, *args: Any) -> str | None:
            self.sent[job.job.trace.index] = time.perf_counter_ns()
            result: str | None = await super().execute(job, due_ns, sink, *args)
            return result

    # 0.3 s of slack, then as many requests at once as the look-ahead holds: the loop falls
    # behind on them, and has prepared them all before.
    arrivals = [0.0] + [0.3] * AHEAD_REQUESTS
    records, client = asyncio.run(replay(arrivals, ReadyLog))
    assert isinstance(client, ReadyLog)
    assert sorted(r.trace_index for r in records) == list(range(len(arrivals)))
    assert {r.outcome for r in records} == {"ok"}
    burst = range(1, len(arrivals))
    first_sent = min(client.sent[i] for i in burst)
    late = [i for i in burst if client.readied[i] > first_sent]
    assert not late, f"{len(late)} of the burst prepared after it began: {late[:5]}"


def test_a_late_open_loop_holds_records_then_lets_them_go() -> None:
    arrivals = [0.0] * BURST + [0.4, 0.5, 0.6]  # then on time again
    records, client = asyncio.run(replay(arrivals))
    holds = client.holds
    assert sorted(r.trace_index for r in records) == list(range(len(arrivals)))
    assert {r.outcome for r in records} == {"ok"}
    assert any(on for on, _ in holds), holds[:20]  # behind during the burst
    # Released on a later wake on time, with the burst's records still waiting: they were
    # held across the 0.4 s gap, not built meanwhile. (Any of the three spaced wakes.)
    released = [waiting for on, waiting in holds[-4:-1] if not on]
    assert released, holds[-8:]
    assert released[0] > BURST // 2, holds[-8:]
    assert holds[-1][0] is False  # and released at the end


def test_a_request_task_that_raises_stops_the_dispatch_and_fails_the_run() -> None:
    sent: list[int] = []

    class Raising(HoldLog):
        """The client, raising from its fourth request instead of recording it."""

        async def execute(self, job: Any, due_ns: int, sink: Any, *args: Any) -> str | None:
            sent.append(job.job.trace.index)
            if job.job.trace.index == 3:
                raise RuntimeError("a bug in the request path")
            result: str | None = await super().execute(job, due_ns, sink, *args)
            return result

    arrivals = [i * 0.005 for i in range(200)]  # a second of requests
    with pytest.raises(BaseExceptionGroup) as raised:
        asyncio.run(replay(arrivals, Raising))
    match = raised.value.subgroup(RuntimeError)
    assert match is not None
    assert str(match.exceptions[0]) == "a bug in the request path"
    assert 3 in sent
    assert len(sent) < 100, len(sent)  # the dispatch stopped soon after, not at the end
