"""The dispatch record: which requests went to the wire, kept so that a killed run can say
exactly what it lost.

The replay appends one fixed-size record (the request's trace index, 8 bytes, little-endian
signed) to ``requests.parts/dispatched.i64`` (``traces.schema.DISPATCH_FILE``) per
request, at the moment its bytes are handed to the socket, straight into the kernel's page
cache (below), which outlives a process killed with SIGKILL; so after kill -9 the file
names every request the server may have received, and
``loadgen.run.recover`` counts as lost the ones with no row. A normal end deletes the file
with the journal (``loadgen.run.recorder.merge_parts``).

Where the record is written, relative to the bytes: just before the request is written to
its socket, by the fast transport right before its ``transport.write`` and, for httpx's
transport, on httpcore's ``send_request_headers.started`` trace event (from there to
anyio's ``transport.write`` nothing yields to the event loop unless the request is being
cancelled). No ``await`` separates the record from the write, so when the process dies at
most one request per process can have a record and no bytes on the wire: the lost count
is exact, or one too high in that microsecond window.

How it is written: into a shared memory map of the file, a chunk of ``CHUNK_RECORDS``
records at a time, laid out (filled with -1, which no trace index is) before any of its
records is due. A store into a shared file mapping is a store into the kernel's page cache,
the same place a ``write(2)`` reaches, so it outlives SIGKILL as well; it costs a memory
store instead of a system call (measured: the one ``write(2)`` a request cost 0.03-0.04 of
a core at 5,000 requests a second, 6-8 µs each, inside a busy replay). A reader stops at
the first -1; ``close()`` cuts the file to the records written, so a finished log is the
bare records. The callable is built when the request is encoded, ahead of its due time
(``marker``).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Callable
from functools import partial
from pathlib import Path

__all__ = ["CHUNK_RECORDS", "RECORD_BYTES", "DispatchLog", "read_dispatched"]

_RECORD = struct.Struct("<q")
RECORD_BYTES = _RECORD.size
CHUNK_RECORDS = 8192
"""Records mapped at a time (64 KiB: a multiple of every platform's mapping granularity)."""
_CHUNK = CHUNK_RECORDS * RECORD_BYTES
_UNUSED = _RECORD.pack(-1)


class DispatchLog:
    """An append-only file of trace indices, one record per request sent (a resource:
    ``close()`` it). Records already in the file (a log opened again) are kept."""

    __slots__ = ("_at", "_base", "_fd", "_map", "path")

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._fd: int | None = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        kept = len(read_dispatched(self.path)) * RECORD_BYTES
        os.ftruncate(self._fd, kept)  # drops a torn record and the unused tail
        self._base = kept - kept % _CHUNK
        """Where the mapped chunk starts in the file."""
        self._at = kept - self._base
        """The next record's place in the chunk."""
        self._map: mmap.mmap | None = None
        self._map_chunk()

    def _map_chunk(self) -> None:
        """Lay out the chunk at ``_base`` (-1 past what it holds) and map it."""
        assert self._fd is not None
        os.pwrite(self._fd, _UNUSED * ((_CHUNK - self._at) // RECORD_BYTES), self._base + self._at)
        self._map = mmap.mmap(self._fd, _CHUNK, offset=self._base)

    def marker(self, index: int) -> Callable[[], object]:
        """What the transport calls when request ``index`` goes to the wire: its record
        stored in the map (a closed log stores nothing)."""
        if self._fd is None:
            return _nothing
        return partial(self._mark, _RECORD.pack(index))

    def _mark(self, record: bytes) -> None:
        chunk = self._map
        if chunk is None:  # closed since the marker was made
            return
        at = self._at
        chunk[at : at + RECORD_BYTES] = record
        at += RECORD_BYTES
        if at < _CHUNK:
            self._at = at
            return
        # Full: the next chunk, laid out before its first record is due. Should that fail
        # (a full disk), this request's marker raises it and the log stores no more.
        chunk.close()
        self._map = None
        self._base += _CHUNK
        self._at = 0
        self._map_chunk()

    def close(self) -> None:
        """Unmap, and cut the file to the records written."""
        if self._map is not None:
            self._map.close()
            self._map = None
        if self._fd is not None:
            os.ftruncate(self._fd, self._base + self._at)
            os.close(self._fd)
            self._fd = None


def _nothing() -> None:
    return None


def read_dispatched(path: Path) -> list[int]:
    """The trace indices recorded in ``path``, in the order they were sent (a request
    retried on a fresh connection appears twice): up to the first -1 (the unused rest of a
    chunk, in the log of a run that did not end), a trailing partial record (a write cut
    short by a full disk) ignored."""
    data = Path(path).read_bytes()
    whole = len(data) - len(data) % RECORD_BYTES
    out: list[int] = []
    for (index,) in _RECORD.iter_unpack(data[:whole]):
        if index < 0:
            break
        out.append(index)
    return out
