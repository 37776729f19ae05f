"""``DeferredCalls``: the loop's spare-time queue for finished streams' bookkeeping."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial

import httpx
import pytest

from loadgen.client import PreparedRequest, StreamingClient
from loadgen.deferred import DeferredCalls
from traces.records import RunRow, TraceRequest

pytestmark = pytest.mark.serial


def test_calls_wait_for_the_loop_and_run_in_order() -> None:
    async def main() -> list[str]:
        done: list[str] = []
        deferred = DeferredCalls()
        for name in "abc":
            deferred.submit(partial(done.append, name))
        assert done == []  # nothing runs inside submit
        assert len(deferred) == 3
        for _ in range(10):
            await asyncio.sleep(0)
        assert len(deferred) == 0
        return done

    assert asyncio.run(main()) == ["a", "b", "c"]


def test_a_slice_yields_to_the_loop_between_calls() -> None:
    """With no time budget each iteration runs one call, and a callback scheduled meanwhile
    (a read, in a run) gets its turn between them."""

    async def main() -> list[str]:
        loop = asyncio.get_running_loop()
        order: list[str] = []
        deferred = DeferredCalls(budget_ns=0)
        for i in range(3):
            deferred.submit(partial(order.append, f"call{i}"))

        def io(k: int) -> None:
            order.append(f"io{k}")
            if k < 2:
                loop.call_soon(io, k + 1)

        loop.call_soon(io, 0)
        for _ in range(10):
            await asyncio.sleep(0)
        return order

    order = asyncio.run(main())
    assert order == ["call0", "io0", "call1", "io1", "call2", "io2"]


def test_held_calls_wait_until_released_and_past_the_bound_run_down_to_it() -> None:
    async def main() -> None:
        done: list[int] = []
        deferred = DeferredCalls(max_held=3)
        deferred.submit(partial(done.append, 0))
        deferred.hold(True)  # already scheduled: its slice finds it held
        for i in range(1, 3):
            deferred.submit(partial(done.append, i))
        for _ in range(10):
            await asyncio.sleep(0)
        assert done == []
        assert len(deferred) == 3
        for i in range(3, 6):  # past the bound: run until the bound is met again
            deferred.submit(partial(done.append, i))
        for _ in range(10):
            await asyncio.sleep(0)
        assert done == [0, 1, 2]
        assert len(deferred) == 3
        deferred.hold(False)
        for _ in range(10):
            await asyncio.sleep(0)
        assert done == list(range(6))
        assert len(deferred) == 0
        deferred.hold(True)
        deferred.submit(partial(done.append, 6))
        deferred.flush()  # a flush runs held calls too
        assert done == list(range(7))

    asyncio.run(main())


def test_flush_runs_the_rest_and_reraises_the_first_error() -> None:
    async def main() -> list[int]:
        done: list[int] = []
        deferred = DeferredCalls()

        def boom(k: int) -> None:
            raise ValueError(f"sink failed {k}")

        deferred.submit(lambda: done.append(1))
        deferred.submit(lambda: boom(1))
        deferred.submit(lambda: boom(2))
        deferred.submit(lambda: done.append(2))
        with pytest.raises(ValueError, match="sink failed 1"):
            deferred.flush()
        assert len(deferred) == 0
        deferred.flush()  # the error was reported once
        return done

    assert asyncio.run(main()) == [1, 2]


def test_an_error_in_a_slice_is_kept_for_flush() -> None:
    async def main() -> None:
        deferred = DeferredCalls()
        deferred.submit(lambda: [][0])
        for _ in range(5):
            await asyncio.sleep(0)
        assert len(deferred) == 0
        with pytest.raises(IndexError):
            deferred.flush()

    asyncio.run(main())


def test_the_client_defers_a_finished_streams_record_until_the_loop_is_free() -> None:
    """``defer_records``: ``execute`` returns first, the record follows on a later loop
    iteration (or at ``flush``), complete."""
    body = (
        b'data: {"choices":[{"index":0,"delta":{"content":"hi"},"finish_reason":null}]}\n\n'
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n'
        b"data: [DONE]\n\n"
    )

    async def stream() -> AsyncIterator[bytes]:
        yield body

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=stream())

    async def main() -> tuple[int, int, list[RunRow]]:
        records: list[RunRow] = []
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
            client = StreamingClient(
                http, base_url="http://test/v1", now_ns=lambda: 1, run_id="r", defer_records=True
            )
            jobs = [
                PreparedRequest(
                    trace=TraceRequest(
                        index=i, request_id=f"q{i}", arrival_s=0.0, input_tokens=4, output_tokens=1
                    ),
                    x_request_id=f"r-q{i}",
                    path="/chat/completions",
                    body=b"{}",
                )
                for i in range(2)
            ]
            await client.execute(jobs[0], 0, records.append)
            right_after = len(records)
            pending = client.deferred
            for _ in range(5):
                await asyncio.sleep(0)
            await client.execute(jobs[1], 0, records.append)
            client.flush()
        return right_after, pending, records

    right_after, pending, records = asyncio.run(main())
    assert (right_after, pending) == (0, 1)
    assert [r.request_id for r in records] == ["q0", "q1"]
    assert all(r.outcome == "ok" and r.finish_reason == "stop" for r in records)
    assert all(len(r.chunk_offsets_us) == 1 for r in records)
