"""The stall log (``loadgen.stalls``): stalls seen by the loop-lag probe, with the cause
the timed spots or the CPU clocks give, bounded, merged over shards."""

from __future__ import annotations

import asyncio
import sys
import threading
import time

import pytest

from loadgen.live import LoopLagMonitor
from loadgen.stalls import (
    GC,
    HOST,
    LOOP_BUSY,
    OTHER_THREAD,
    PROMPT_BUILD,
    SPAN_MIN_NS,
    StallWatch,
    cpu_cause,
    merge_stall_logs,
)
from traces.health import MAX_STALLS_LISTED

pytestmark = pytest.mark.serial

MS = 1_000_000


def _block(seconds: float, *, cpu: bool) -> None:
    """Hold the calling thread: asleep, or busy for ``seconds`` of its own CPU time."""
    if not cpu:
        time.sleep(seconds)
        return
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def _stall_on_the_loop(watch: StallWatch, block: float, *, timed: bool) -> float:
    """A real loop with the probe running; one blocking call of ``block`` s on it: asleep
    in a timed spot, or busy in none. Returns the call's wall time (s)."""
    took: list[float] = []

    async def main() -> None:
        monitor = LoopLagMonitor(stalls=watch)
        task = asyncio.create_task(monitor.run())
        await asyncio.sleep(0.03)
        began = time.perf_counter()
        if timed:
            with watch.span(PROMPT_BUILD):
                _block(block, cpu=False)
        else:
            _block(block, cpu=True)
        took.append(time.perf_counter() - began)
        await asyncio.sleep(0.03)
        task.cancel()

    asyncio.run(main())
    return took[0]


def test_a_stall_in_a_timed_spot_is_logged_with_that_cause() -> None:
    watch = StallWatch(shard=3)
    origin = time.perf_counter_ns()
    _stall_on_the_loop(watch, 0.06, timed=True)
    log = watch.log(origin)
    assert log.count >= 1
    worst = max(log.stalls, key=lambda s: s.duration_ms)
    assert worst.cause == PROMPT_BUILD
    assert worst.shard == 3
    assert worst.duration_ms >= 40
    assert log.worst_ms == worst.duration_ms
    assert 0 < worst.start_s < 1


def test_an_untimed_stall_on_the_loop_reads_as_loop_busy() -> None:
    watch = StallWatch()
    wall = _stall_on_the_loop(watch, 0.08, timed=False)
    causes = {s.cause for s in watch.log(0).stalls}
    # 80 ms of the loop thread's own CPU; on a host so busy that took over 4x as long in
    # wall time, the process mostly waited for a core, and the log says so.
    if wall < 0.08 * 3.5:
        assert LOOP_BUSY in causes, (wall, causes)
    elif wall > 0.08 * 5:
        assert HOST in causes, (wall, causes)
    else:  # near the line (a quarter of the stall on the loop's thread): either
        assert causes & {LOOP_BUSY, HOST}, (wall, causes)


def test_cpu_clocks_tell_the_loop_another_thread_and_the_host_apart() -> None:
    assert cpu_cause(40 * MS, 35 * MS, 0) == LOOP_BUSY
    assert cpu_cause(40 * MS, 12 * MS, 1 * MS) == LOOP_BUSY  # on a core a third of the time
    assert cpu_cause(40 * MS, 1 * MS, 38 * MS) == OTHER_THREAD
    assert cpu_cause(40 * MS, 1 * MS, 2 * MS) == HOST


def test_the_log_is_bounded_and_counts_every_stall() -> None:
    watch = StallWatch()
    n = 5 * MAX_STALLS_LISTED
    for k in range(n):
        watch.tick(wake_ns=(k + 1) * 1000 * MS, lag_ns=(21 + k % 50) * MS)
    log = watch.log(0)
    assert log.count == n
    assert len(log.stalls) == MAX_STALLS_LISTED
    assert min(s.duration_ms for s in log.stalls) >= 61  # the longest kept (61..70 ms)
    assert [s.start_s for s in log.stalls] == sorted(s.start_s for s in log.stalls)
    watch.tick(wake_ns=(n + 2) * 1000 * MS, lag_ns=19 * MS)  # under the threshold
    assert watch.log(0).count == n


def test_shards_merge_into_one_log() -> None:
    a, b = StallWatch(shard=0), StallWatch(shard=1)
    a.tick(wake_ns=2000 * MS, lag_ns=30 * MS)
    b.tick(wake_ns=1000 * MS, lag_ns=80 * MS)
    merged = merge_stall_logs([a.log(0), b.log(0)])
    assert merged is not None
    assert merged.count == 2
    assert merged.worst_ms == 80.0
    assert [s.shard for s in merged.stalls] == [1, 0]
    assert merge_stall_logs([]) is None


def test_a_timed_spot_covering_little_of_a_stall_is_not_its_cause() -> None:
    watch = StallWatch()
    start = time.perf_counter_ns()
    watch.mark(PROMPT_BUILD, start + 15 * MS, start + 20 * MS)  # 5 ms of a 30 ms stall
    watch.tick(wake_ns=start + 40 * MS, lag_ns=30 * MS)
    (stall,) = watch.log(start).stalls
    assert stall.cause != PROMPT_BUILD
    watch.mark(PROMPT_BUILD, start + 45 * MS, start + 80 * MS)  # all of the next one
    watch.tick(wake_ns=start + 80 * MS, lag_ns=30 * MS)
    assert watch.log(start).stalls[1].cause == PROMPT_BUILD


def test_spans_marked_from_another_thread_during_a_stall_lookup_are_safe() -> None:
    """The recorder's thread (and a collection in any thread) marks spans while the loop
    looks a stall's cause up in them: the lookup must not fail mid-iteration."""
    watch = StallWatch()
    stop = threading.Event()

    def marker() -> None:
        k = 0
        while not stop.is_set():
            watch.mark(GC, k, k + 2 * SPAN_MIN_NS)
            k += 1

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible
    thread = threading.Thread(target=marker)
    thread.start()
    try:
        for i in range(300):
            watch.tick(10**12 + i * 10**9, 50_000_000)
    finally:
        stop.set()
        thread.join()
        sys.setswitchinterval(interval)
    assert watch.log(0).count == 300
