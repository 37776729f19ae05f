"""Stamp delay: how long bytes wait in the kernel before the replay's event loop stamps them.

Every read of a response is stamped at the top of its ``data_received`` (or its httpx
iteration), which runs only when the event loop gets round to the socket. While the loop
is busy (many streams, a long parse, a collector pass) bytes that have arrived sit in the
socket and are stamped late: that delay reads as server latency. The event-loop lag
sampler sees how late a *timer* fires; this probe measures the same thing for a *read*,
which is what a stamp is.

How: a UDP socket on loopback, registered with the replay's event loop like the
responses' sockets, with ``SO_TIMESTAMPNS`` on, so the kernel records when each datagram
arrived (CLOCK_REALTIME, ns). A thread sends one small datagram every ``interval_s``; the
loop's reader callback takes its stamp first, as the transports do, then reads every
waiting datagram and records ``stamp - kernel arrival`` for each. The thread's timing
does not matter (a datagram it sends late is simply timestamped late by the kernel):
only the kernel's arrival time and the loop's stamp enter the delay. Where the kernel gives
no timestamp (not Linux), the sender's own reading, taken just before ``sendto``, stands in
(late by the thread's wait for the GIL, so the delay then reads low).

Cost: ``1 / interval_s`` datagrams a second (100 by default; measured on a 2-core VM: 1.4%
of a core, most of it the thread's wake-ups); nothing on the responses' path. Sampling in
time, not per response read: a stall of ``d`` shows as samples from ``d`` down to 0, so the
maximum is the longest stall the probe overlapped, to within ``interval_s``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import sys
import threading
import time
from collections.abc import Callable

from hdrh.histogram import HdrHistogram

from loadgen.live import summarize_us
from traces.health import LagSummary

__all__ = ["StampDelayProbe"]

_MAX_US = 3_600_000_000
_SO_TIMESTAMPNS: int | None = getattr(
    socket, "SO_TIMESTAMPNS", 35 if sys.platform == "linux" else None
)  # Linux's number (asm-generic, x86, arm); Python 3.11 does not name it
_SCM_TIMESTAMPNS = _SO_TIMESTAMPNS  # the control message's type is the option's number
_TIMESPEC = struct.Struct("@qq")
_PAYLOAD = struct.Struct("!q")


class StampDelayProbe:
    """Measures the event loop's stamp delay on loopback until ``stop``; ``summary()``
    gives the distribution in ms. Start it inside the running loop it measures."""

    def __init__(
        self, interval_s: float = 0.01, *, wall_ns: Callable[[], int] = time.time_ns
    ) -> None:
        self._interval_s = interval_s
        self._wall_ns = wall_ns
        self.delay_us = HdrHistogram(1, _MAX_US, 3)
        self.kernel_stamps = False
        """Whether the delays rest on the kernel's arrival times (else the sender's)."""
        self._rx: socket.socket | None = None
        self._tx: socket.socket | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def start(self) -> None:
        """Open the sockets, register the reader with the running loop, start the sender."""
        loop = asyncio.get_running_loop()
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        try:
            rx.bind(("127.0.0.1", 0))
            rx.setblocking(False)
            if _SO_TIMESTAMPNS is not None:
                with contextlib.suppress(OSError):  # then the sender's readings stand in
                    rx.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
            tx.connect(rx.getsockname())
            loop.add_reader(rx.fileno(), self._on_readable)
        except OSError:
            rx.close()
            tx.close()
            raise
        self._rx, self._tx, self._loop = rx, tx, loop
        self._thread = threading.Thread(target=self._send, name="stamp-delay-probe", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop the sender, drain what arrived, unregister and close (idempotent)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=1.0)
            self._thread = None
        rx, tx = self._rx, self._tx
        if rx is not None:
            self._on_readable()
            if self._loop is not None:
                self._loop.remove_reader(rx.fileno())
            rx.close()
            self._rx = None
        if tx is not None:
            tx.close()
            self._tx = None

    def summary(self) -> LagSummary:
        """The delays so far, in ms."""
        return summarize_us(self.delay_us)

    # -- the sender thread
    def _send(self) -> None:
        tx, wall_ns, pack = self._tx, self._wall_ns, _PAYLOAD.pack
        assert tx is not None
        interval, stopped = self._interval_s, self._stop.is_set
        while not stopped():
            time.sleep(interval)  # cheaper than Event.wait's timed lock
            try:
                tx.send(pack(wall_ns()))
            except OSError:  # the receiver's buffer is full (a very long stall): skip one
                continue

    # -- the event loop's reader: stamps first, like a transport's data_received
    def _on_readable(self) -> None:
        stamp = self._wall_ns()
        rx = self._rx
        if rx is None:
            return
        record = self.delay_us.record_value
        space = socket.CMSG_SPACE(_TIMESPEC.size)
        for _ in range(10_000):  # bounded: the buffer holds far fewer datagrams
            try:
                data, ancdata, _flags, _addr = rx.recvmsg(16, space)
            except (BlockingIOError, InterruptedError):
                return
            except OSError:
                return
            arrived = None
            for level, kind, payload in ancdata:
                if level == socket.SOL_SOCKET and kind == _SCM_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack(payload[: _TIMESPEC.size])
                    arrived = sec * 1_000_000_000 + nsec
                    self.kernel_stamps = True
            if arrived is None and len(data) == _PAYLOAD.size:
                (arrived,) = _PAYLOAD.unpack(data)
            if arrived is not None:
                record(max(1, (stamp - arrived) // 1000))
