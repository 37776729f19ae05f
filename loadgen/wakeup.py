"""Wake coroutines at absolute ``time.perf_counter_ns()`` deadlines, precisely: the one
wake-up mechanism of the replay (open-loop due times, ``max_rate`` slots) and the simulator
(chunk writes).

The event loop's own timers are only millisecond-grained (asyncio rounds the selector timeout
up to the next millisecond, libuv keeps a millisecond clock and can wake up to 1 ms early), too
coarse for a replay that sends within microseconds of a due time, or a simulator whose chunk
times tests check to ~1 ms. On Linux a single ``timerfd``
armed on CLOCK_MONOTONIC (the clock behind ``perf_counter_ns``) with an *absolute* expiry,
registered as a loop reader, wakes the loop within tens of microseconds without spinning; all
waiters share it through a heap of deadlines. Elsewhere a portable fallback sleeps coarsely
and then yields to the loop until the deadline passes.

Imports nothing of ours: the simulator shares it without loading the replay client.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import itertools
import os
import sys
import time
from typing import Protocol

_CLOCK_MONOTONIC = 1
_TFD_TIMER_ABSTIME = 1
_FALLBACK_SPIN_NS = 2_000_000


class DeadlineTimer(Protocol):
    """Something that sleeps until an absolute ``perf_counter_ns`` instant."""

    def open(self) -> None:
        """Bind to the running event loop; call once before the first sleep."""

    def close(self) -> None:
        """Release the loop resources; pending sleepers are cancelled."""

    async def sleep_until(self, due_ns: int) -> None:
        """Return at (not before) ``due_ns``; immediately if it has passed."""


class _Timespec(ctypes.Structure):
    _fields_ = (("tv_sec", ctypes.c_long), ("tv_nsec", ctypes.c_long))


class _Itimerspec(ctypes.Structure):
    _fields_ = (("it_interval", _Timespec), ("it_value", _Timespec))


class TimerfdDeadlineTimer:
    """One Linux timerfd, armed at the earliest pending deadline, shared by every sleeper."""

    def __init__(self) -> None:
        self._libc = ctypes.CDLL(None, use_errno=True)
        self._heap: list[tuple[int, int, asyncio.Future[None]]] = []
        self._seq = itertools.count()
        self._fd = -1
        self._armed_ns: int | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @staticmethod
    def available() -> bool:
        """Whether this platform has timerfd and ``perf_counter_ns`` is CLOCK_MONOTONIC."""
        if not sys.platform.startswith("linux"):
            return False
        info = time.get_clock_info("perf_counter")
        if "CLOCK_MONOTONIC" not in info.implementation or "RAW" in info.implementation:
            return False
        return hasattr(ctypes.CDLL(None), "timerfd_create")

    def open(self) -> None:
        self._loop = asyncio.get_running_loop()
        fd = int(self._libc.timerfd_create(_CLOCK_MONOTONIC, os.O_NONBLOCK | os.O_CLOEXEC))
        if fd < 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_create: {os.strerror(err)}")
        self._fd = fd
        self._loop.add_reader(fd, self._on_fire)

    def close(self) -> None:
        if self._fd >= 0 and self._loop is not None:
            self._loop.remove_reader(self._fd)
            os.close(self._fd)
        self._fd = -1
        for _, _, fut in self._heap:
            fut.cancel()
        self._heap.clear()

    async def sleep_until(self, due_ns: int) -> None:
        if due_ns <= time.perf_counter_ns():
            return
        if self._loop is None:
            raise RuntimeError("TimerfdDeadlineTimer.open() was not called")
        fut: asyncio.Future[None] = self._loop.create_future()
        heapq.heappush(self._heap, (due_ns, next(self._seq), fut))
        if self._armed_ns is None or due_ns < self._armed_ns:
            self._arm(due_ns)
        # A cancelled sleeper leaves its entry behind; _on_fire skips done futures.
        await fut

    def _on_fire(self) -> None:
        with contextlib.suppress(BlockingIOError):  # another wake-up already read it
            os.read(self._fd, 8)
        self._armed_ns = None
        now = time.perf_counter_ns()
        heap = self._heap
        while heap and (heap[0][0] <= now or heap[0][2].done()):
            _, _, fut = heapq.heappop(heap)
            if not fut.done():
                fut.set_result(None)
        if heap:
            self._arm(heap[0][0])

    def _arm(self, due_ns: int) -> None:
        spec = _Itimerspec()
        spec.it_value.tv_sec, spec.it_value.tv_nsec = divmod(due_ns, 1_000_000_000)
        if spec.it_value.tv_sec == 0 and spec.it_value.tv_nsec == 0:
            spec.it_value.tv_nsec = 1  # an all-zero expiry would disarm the timer
        rc = int(self._libc.timerfd_settime(self._fd, _TFD_TIMER_ABSTIME, ctypes.byref(spec), None))
        if rc != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"timerfd_settime: {os.strerror(err)}")
        self._armed_ns = due_ns


class SpinDeadlineTimer:
    """Portable fallback: a coarse loop sleep, then yield to the loop until the deadline."""

    def open(self) -> None:
        return None

    def close(self) -> None:
        return None

    async def sleep_until(self, due_ns: int) -> None:
        coarse_s = (due_ns - time.perf_counter_ns() - _FALLBACK_SPIN_NS) / 1e9
        if coarse_s > 0:
            await asyncio.sleep(coarse_s)
        # Deliberate spin: loop timers are ms-grained; yielding keeps other tasks running.
        while time.perf_counter_ns() < due_ns:  # noqa: ASYNC110
            await asyncio.sleep(0)


def make_deadline_timer() -> DeadlineTimer:
    """The most precise timer this platform offers."""
    if TimerfdDeadlineTimer.available():
        return TimerfdDeadlineTimer()
    return SpinDeadlineTimer()
