"""A sans-IO decoder of Server-Sent Events (the WHATWG ``text/event-stream`` format).

Fed bytes as they arrive, it returns the ``data`` payload of every event that completed.
It never touches a socket or a clock: the caller stamps arrival times before feeding.
The same bytes split at any points yield the same events (fuzzed in the tests).
"""

from __future__ import annotations


class SSEDecoder:
    """Incremental SSE decoder returning each dispatched event's data as bytes.

    Lines end in LF, CRLF or CR; a blank line dispatches the event; ``data:`` lines of one
    event are joined with LF; one space after the colon is dropped; comments (``:``) and the
    ``event``/``id``/``retry`` fields are ignored (OpenAI-style streams do not use them).
    An event without any data line is not dispatched.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the data of every event completed by them, in order."""
        buf = self._buf + data if self._buf else data
        if b"\r" in buf:
            # A trailing CR may be the first half of a CRLF split across reads: keep it.
            hold = buf.endswith(b"\r")
            if hold:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if hold:
                buf += b"\r"
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        out: list[bytes] = []
        for block in blocks:
            payload = _event_data(block)
            if payload is not None:
                out.append(payload)
        return out

    def flush(self) -> list[bytes]:
        """End of stream: dispatch a final event that lacked its blank line, if any."""
        buf, self._buf = self._buf, b""
        if buf.endswith(b"\r"):
            buf = buf[:-1]
        buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
        out: list[bytes] = []
        for block in buf.split(b"\n\n"):
            payload = _event_data(block)
            if payload is not None:
                out.append(payload)
        return out


def _event_data(block: bytes) -> bytes | None:
    """The joined data lines of one event block, or None when it has none."""
    if block.startswith(b"data: ") and b"\n" not in block:
        return block[6:]  # the common case: one `data: ...` line
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
