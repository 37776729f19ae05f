"""The dispatch record: which requests went to the wire, kept so that a killed run can say
exactly what it lost.

The replay appends one fixed-size record (the request's trace index, 8 bytes, little-endian
signed) to ``requests.parts/dispatched.i64`` (``traces.schema.DISPATCH_FILE``) with one
unbuffered ``os.write`` per request, at the moment its bytes are handed to the socket. A
write that returned is in the kernel's page cache, which outlives a process killed with
SIGKILL; so after kill -9 the file names every request the server may have received, and
``loadgen.run.recover`` counts as lost the ones with no row. A normal end deletes the file
with the journal (``loadgen.run.recorder.merge_parts``).

Where the record is written, relative to the bytes: just before the request is written to
its socket, by the fast transport right before its ``transport.write`` and, for httpx's
transport, on httpcore's ``send_request_headers.started`` trace event (from there to
anyio's ``transport.write`` nothing yields to the event loop unless the request is being
cancelled). No ``await`` separates the record from the write, so when the process dies at
most one request per process can have a record and no bytes on the wire: the lost count
is exact, or one too high in that microsecond window.

The hot-path cost is one ``write(2)`` of 8 bytes (about a microsecond); the callable is
built when the request is encoded, ahead of its due time (``marker``).
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from functools import partial
from pathlib import Path

__all__ = ["RECORD_BYTES", "DispatchLog", "read_dispatched"]

_RECORD = struct.Struct("<q")
RECORD_BYTES = _RECORD.size


class DispatchLog:
    """An append-only file of trace indices, one record per request sent (a resource:
    ``close()`` it)."""

    __slots__ = ("_fd", "path")

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC
        self._fd: int | None = os.open(self.path, flags, 0o644)

    def marker(self, index: int) -> Callable[[], object]:
        """What the transport calls when request ``index`` goes to the wire: one
        ``os.write`` of its record (a closed log writes nothing)."""
        if self._fd is None:
            return _nothing
        return partial(os.write, self._fd, _RECORD.pack(index))

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def _nothing() -> None:
    return None


def read_dispatched(path: Path) -> list[int]:
    """The trace indices recorded in ``path``, in the order they were sent (a request
    retried on a fresh connection appears twice). A trailing partial record (a write cut
    short by a full disk) is ignored."""
    data = Path(path).read_bytes()
    whole = len(data) - len(data) % RECORD_BYTES
    return [index for (index,) in _RECORD.iter_unpack(data[:whole])]
