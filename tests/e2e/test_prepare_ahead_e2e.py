"""Bodies built off the event loop (``loadgen.prepare.ahead``): a trace with images or huge
prompts starts the preparer process and the simulator on loopback gets the right bodies
(prompt length, images); an ordinary trace starts none; the look-ahead stays within its
byte bound, and every body it hands over is byte for byte the one built on the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pyarrow as pa
import pyarrow.parquet as pq

from loadgen.prepare.ahead import AHEAD_TOKENS, AheadBodies, plan_ahead
from loadgen.prepare.preparer import Preparer
from loadgen.run.session import SessionOptions, run_session
from loadgen.shape import LoadShape
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import read_run_info, write_trace
from traces.prompts.maker import PromptMaker
from traces.records import TraceRequest
from traces.runinfo import Capabilities

SimFactory = Callable[..., SimProcess]
_T = TypeVar("_T")
IMAGE_TOKENS = 50
HUGE = AHEAD_TOKENS + 3_000


def _replay(trace: Path, run_dir: Path, base_url: str) -> Path:
    result = asyncio.run(
        run_session(
            SessionOptions(
                trace_path=trace,
                run_dir=run_dir,
                base_url=base_url,
                scrape_metrics=False,
            ),
            install_signal_handlers=False,
        )
    )
    return result.run_dir


def test_images_and_huge_prompts_are_built_ahead_ordinary_prompts_on_the_loop(
    sim: SimFactory, tmp_path: Path
) -> None:
    server = sim("--image-tokens", str(IMAGE_TOKENS), "--itl-ms", "1")
    images = [None, [{"width": 48, "height": 32}] * 3, None, [{"width": 40, "height": 40}], None]
    inputs = [20, 30, HUGE, 25, HUGE + 1]
    trace = tmp_path / "t.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(5)],
                "arrival_s": [i * 0.02 for i in range(5)],
                "input_tokens": inputs,
                "output_tokens": [3] * 5,
                "images": pa.array(images, type=pa.list_(s.IMAGE_TYPE)),
            }
        ),
        trace,
    )
    run = _replay(trace, tmp_path / "run", server.base_url)
    info = read_run_info(run)
    assert info is not None
    assert info.health is not None
    ahead = info.health.prepare_ahead
    assert ahead is not None
    assert ahead.bodies == 5
    assert "2 request(s) with images" in ahead.reason
    assert f"2 prompt(s) of {AHEAD_TOKENS:,}+ tokens" in ahead.reason
    rows = {r[s.REQUEST_ID]: r for r in pq.read_table(run / s.REQUESTS_FILE).to_pylist()}
    for i, (tokens, imgs) in enumerate(zip(inputs, images, strict=True)):
        row = rows[f"q{i}"]
        assert row[s.OUTCOME] == s.OUTCOME_OK, row[s.ERROR]
        # The simulator counts the text's words and a fixed cost per image it decoded.
        assert row[s.PROMPT_TOKENS] == tokens + IMAGE_TOKENS * len(imgs or ()), i

    # An ordinary trace (no images, every prompt under the threshold) starts none.
    trace = tmp_path / "ordinary.parquet"
    write_trace(
        pa.table(
            {
                "request_id": ["a", "b", "c"],
                "arrival_s": [0.0, 0.01, 0.02],
                "input_tokens": [100, AHEAD_TOKENS - 1, 10],
                "output_tokens": [2, 2, 2],
            }
        ),
        trace,
    )
    run = _replay(trace, tmp_path / "ordinary", server.base_url)
    info = read_run_info(run)
    assert info is not None
    assert info.health is not None
    assert info.health.prepare_ahead is None
    rows = pq.read_table(run / s.REQUESTS_FILE).to_pylist()
    assert [r[s.OUTCOME] for r in rows] == [s.OUTCOME_OK] * 3


def _requests(n: int) -> list[TraceRequest]:
    """Bodies of about 130 KB (files) and 50 KB (in the pipe's messages), alternating."""
    return [
        TraceRequest(
            index=i,
            request_id=f"r{i}",
            arrival_s=i * 1.0,
            input_tokens=HUGE if i % 2 == 0 else 7_000,
            output_tokens=1,
        )
        for i in range(n)
    ]


def _event_loop_run(coro: Coroutine[Any, Any, _T]) -> _T:
    """``coro`` on uvloop where installed (the CLI's loop), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


def test_the_look_ahead_stays_within_its_byte_bound() -> None:
    preparer = Preparer(prompts=PromptMaker(), model="m", run_id="run", capabilities=Capabilities())
    requests = _requests(10)
    sizes = [len(preparer.body(r)) for r in requests]
    bound = sum(sizes[:3]) + min(sizes) // 2  # three bodies fit, a fourth does not
    assert plan_ahead(preparer, requests[:1], LoadShape(), 0) is None  # 0: always inline
    planned = plan_ahead(preparer, requests, LoadShape(), 1)
    assert planned is not None
    assert planned.bound_bytes == 1024 * 1024

    async def run() -> tuple[list[int], dict[int, bytes]]:
        # 7 stands for a closed session's later turn: built only when it is taken.
        order = [k for k in range(10) if k != 7]
        ahead = AheadBodies(
            preparer, requests, [True] * 10, bound_bytes=bound, reason="test", order=order
        )
        await ahead.start()
        try:
            peaks: list[int] = []
            bodies: dict[int, bytes] = {}
            for position in range(4):
                # Long enough for an unbounded preparer to have built every body.
                await asyncio.sleep(0.05 if position else 0.5)
                peaks.append(ahead.peak_bytes)
                bodies[position] = bytes(await ahead.take(position))
            # A body behind the bound that the replay waits for (a session's turn that
            # would free the slot an opener holds) is built all the same.
            bodies[8] = bytes(await ahead.take(8))
            for position in (4, 5, 6, 7, 9):
                bodies[position] = bytes(await ahead.take(position))
            return peaks, bodies
        finally:
            ahead.close()

    peaks, bodies = _event_loop_run(run())
    assert peaks[0] == sum(sizes[:3])  # as far ahead as the bound allows, and no further
    assert max(peaks) <= bound
    assert [bodies[k] for k in range(10)] == [preparer.body(r) for r in requests]
