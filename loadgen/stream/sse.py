"""A sans-IO decoder of Server-Sent Events (the WHATWG ``text/event-stream`` format).

Fed bytes as they arrive, it returns the ``data`` payload of every event that completed.
It never touches a socket or a clock: the caller stamps arrival times before feeding.
The same bytes split at any points yield the same events (fuzzed in the tests).

Bounded and linear: each byte fed is looked at a fixed number of times, however the
stream is split (line ends are normalized as they arrive, and only the new bytes are
searched for the blank line that ends an event), and the event not yet complete is held
up to ``max_event_bytes``; a longer event ends the stream (``SSEDecoder.error``).
"""

from __future__ import annotations

from typing import Final

# Substring tests use ``find``: ``needle in data`` first tries the needle as an integer
# (``bytes`` also holds ints), and on CPython 3.11 that builds and discards a TypeError,
# which costs more than the search on these paths.

MIB: Final = 1024 * 1024

DEFAULT_MAX_EVENT_BYTES: Final = 32 * MIB
"""The longest event a stream may hold: room for a whole 1M-token response in one event.

A server that streams sends a few tokens per event (a few hundred bytes); one that sends
a whole response as one event (a final chunk with all the text, or a stream that is not
really one) sends its text JSON-escaped: about 4 bytes per token of English, and at worst
12 (a token that is one emoji written as a ``\\uXXXX\\uXXXX`` surrogate pair). 1M tokens
at 32 bytes each leave room for that worst case and for the chunk's other fields with
more than 2x to spare, while a server that never ends its event costs at most 32 MiB per
stream (and the time to read them) before the stream is refused, instead of every byte
it sends."""


def size_text(nbytes: int) -> str:
    """``nbytes`` in MiB where it is a whole number of them (``32 MiB``), else in bytes."""
    return f"{nbytes // MIB} MiB" if nbytes % MIB == 0 else f"{nbytes} bytes"


class SSEDecoder:
    """Incremental SSE decoder returning each dispatched event's data as bytes.

    Lines end in LF, CRLF or CR; a blank line dispatches the event; ``data:`` lines of one
    event are joined with LF; one space after the colon is dropped; comments (``:``) and the
    ``event``/``id``/``retry`` fields are ignored (OpenAI-style streams do not use them).
    An event without any data line is not dispatched.

    An event is dispatched by the read that completes its blank line: a CR ends a line
    where it stands (an LF right after it, in the same read or the next, is the rest of
    that CRLF). An event longer than ``max_event_bytes`` (its lines without the blank
    line, each line end counted as one byte) ends the stream: the events before it are
    returned, ``error`` says why, and nothing after it is read. The verdict does not
    depend on where the reads split the stream.
    """

    __slots__ = ("_cr", "_limit", "_pending", "error")
    # ``loadgen.stream._sse_scan.scan_feed`` frames a read exactly as ``_blocks`` does, on
    # these slots: ``_pending`` (the event not yet complete, its line ends already LF),
    # ``_cr`` (the last byte fed was a CR), ``_limit``, and ``error``; it calls ``_refuse``.

    def __init__(self, max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES) -> None:
        if max_event_bytes < 1:
            raise ValueError(f"max_event_bytes must be at least 1, got {max_event_bytes}")
        self._limit = max_event_bytes
        self._pending = bytearray()
        self._cr = False
        self.error: str | None = None
        """Why the stream was refused (an event beyond the limit), or None."""

    @property
    def max_event_bytes(self) -> int:
        return self._limit

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the data of every event completed by them, in order."""
        out: list[bytes] = []
        for block in self._blocks(data):
            payload = event_data(block)
            if payload is not None:
                out.append(payload)
        return out

    def feed_raw(self, data: bytes) -> bytes:
        """Like ``feed``, but the completed events come back undecoded: their text (no CR;
        whole blocks separated by blank lines, without the last one), which
        ``decode_blocks`` turns into exactly the list ``feed`` would have returned. Empty
        when no event completed."""
        return b"\n\n".join(self._blocks(data))

    def _blocks(self, data: bytes) -> list[bytes]:
        """The event blocks (CR-free, no blank line) that ``data`` completes."""
        if self.error is not None or not data:
            return []
        if self._cr and data[0] == 0x0A:  # the LF of a CRLF whose CR ended the last read
            data = data[1:]
        self._cr = data[-1:] == b"\r"
        if data.find(b"\r") >= 0:
            data = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        if not data:
            return []
        pending = self._pending
        if pending:
            # Only the new bytes are searched; a blank line may start at pending's last LF.
            if not (pending[-1] == 0x0A and data[0] == 0x0A) and data.find(b"\n\n") < 0:
                pending += data
                self._check_pending()
                return []
            data = bytes(pending) + data  # the pending event completes: copied once
            pending.clear()
        elif data.find(b"\n\n") < 0:
            pending += data
            self._check_pending()
            return []
        blocks = data.split(b"\n\n")
        pending += blocks.pop()
        limit = self._limit
        for i, block in enumerate(blocks):
            if len(block) > limit:
                self._refuse()
                return blocks[:i]
        self._check_pending()
        return blocks

    def _check_pending(self) -> None:
        """Refuse the stream once the pending event is certain to exceed the limit: a last
        LF of it may be the first half of the blank line, and does not count."""
        pending = self._pending
        if len(pending) - pending.endswith(b"\n") > self._limit:
            self._refuse()

    def _refuse(self) -> None:
        self.error = (
            f"an SSE event longer than {size_text(self._limit)} (the limit: loadgen replay "
            "--max-event-mib): the stream was not read further"
        )
        self._pending = bytearray()  # its memory goes at once

    def flush(self) -> list[bytes]:
        """End of stream: dispatch a final event that lacked its blank line, if any."""
        if self.error is not None:
            return []
        text = bytes(self._pending)
        self._pending.clear()
        self._cr = False
        payload = event_data(text) if text else None
        return [payload] if payload is not None else []


def event_data(block: bytes) -> bytes | None:
    """The joined data lines of one event block, or None when it has none."""
    if block.startswith(b"data: ") and block.find(b"\n") < 0:
        return block[6:]  # the common case: one `data: ...` line
    if block.startswith(b"event: "):  # `event: <type>` then one `data: ...` line (typed
        nl = block.find(b"\n")  # streams: the Responses API); the event name is ignored
        if nl > 0 and block.startswith(b"data: ", nl + 1) and block.find(b"\n", nl + 1) < 0:
            return block[nl + 7 :]
    parts: list[bytes] = []
    for line in block.split(b"\n"):
        if not line or line.startswith(b":"):
            continue
        name, sep, value = line.partition(b":")
        if name != b"data":
            continue
        if sep and value.startswith(b" "):
            value = value[1:]
        parts.append(value)
    if not parts:
        return None
    return b"\n".join(parts)


def decode_blocks(text: bytes) -> list[bytes]:
    """The data of every event in ``text``: whole, CR-free blocks as ``feed_raw`` returns."""
    out: list[bytes] = []
    for block in text.split(b"\n\n"):
        payload = event_data(block)
        if payload is not None:
            out.append(payload)
    return out
