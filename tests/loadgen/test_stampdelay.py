"""The stamp-delay probe on both event loops the replay runs on: a loop kept busy for
300 ms shows a delay of about that, with the kernel's receive times on Linux."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from loadgen.stampdelay import StampDelayProbe
from traces.health import LagSummary

pytestmark = pytest.mark.serial

BUSY_S = 0.3

Runner = Callable[[Coroutine[Any, Any, LagSummary]], LagSummary]


async def _measure(busy_s: float) -> LagSummary:
    probe = StampDelayProbe()
    probe.start()
    try:
        await asyncio.sleep(0.1)
        end = time.perf_counter() + busy_s
        while time.perf_counter() < end:  # the loop's thread, busy: nothing is stamped
            pass
        await asyncio.sleep(0.1)
    finally:
        probe.stop()
    assert probe.kernel_stamps == sys.platform.startswith("linux")
    return probe.summary()


@pytest.mark.parametrize("loop", ["asyncio", "uvloop"])
def test_a_busy_loop_delays_the_stamps_by_as_long(loop: str) -> None:
    run: Runner = asyncio.run if loop == "asyncio" else pytest.importorskip("uvloop").run
    busy = run(_measure(BUSY_S))
    assert busy.samples >= 10, busy
    # The datagram that arrived as the loop went busy waited all of it (the sender's
    # 10 ms period, and a loaded machine's scheduling, take some off).
    assert BUSY_S * 1000 * 0.6 <= busy.max_ms < BUSY_S * 1000 + 200, busy


def test_stop_is_idempotent_and_the_sockets_close() -> None:
    async def twice() -> StampDelayProbe:
        probe = StampDelayProbe()
        probe.start()
        await asyncio.sleep(0.05)
        probe.stop()
        probe.stop()
        return probe

    probe = asyncio.run(twice())
    assert probe.summary().samples >= 1
