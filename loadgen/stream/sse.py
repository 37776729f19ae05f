"""A sans-IO decoder of Server-Sent Events (the WHATWG ``text/event-stream`` format).

Fed bytes as they arrive, it returns the ``data`` payload of every event that completed.
It never touches a socket or a clock: the caller stamps arrival times before feeding.
The same bytes split at any points yield the same events (fuzzed in the tests).
"""

from __future__ import annotations

# Substring tests use ``find``: ``needle in data`` first tries the needle as an integer
# (``bytes`` also holds ints), and on CPython 3.11 that builds and discards a TypeError,
# which costs more than the search on these paths.


class SSEDecoder:
    """Incremental SSE decoder returning each dispatched event's data as bytes.

    Lines end in LF, CRLF or CR; a blank line dispatches the event; ``data:`` lines of one
    event are joined with LF; one space after the colon is dropped; comments (``:``) and the
    ``event``/``id``/``retry`` fields are ignored (OpenAI-style streams do not use them).
    An event without any data line is not dispatched.
    """

    __slots__ = ("_buf",)
    # ``_buf`` (the bytes of an event not yet complete) is also read and written by
    # ``loadgen.stream._sse_scan.scan_feed``, which frames a read exactly as ``feed_raw`` does.

    def __init__(self) -> None:
        self._buf = b""

    def feed(self, data: bytes) -> list[bytes]:
        """Add bytes; return the data of every event completed by them, in order."""
        buf = self._buf + data if self._buf else data
        if buf.find(b"\r") >= 0:
            # A trailing CR may be the first half of a CRLF split across reads: keep it.
            hold = buf.endswith(b"\r")
            if hold:
                buf = buf[:-1]
            buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
            if hold:
                buf += b"\r"
        if buf.find(b"\n\n") < 0:
            self._buf = buf
            return []
        blocks = buf.split(b"\n\n")
        self._buf = blocks.pop()
        out: list[bytes] = []
        for block in blocks:
            payload = event_data(block)
            if payload is not None:
                out.append(payload)
        return out

    def feed_raw(self, data: bytes) -> bytes | list[bytes]:
        """Like ``feed``, but on the common path the completed events come back undecoded.

        Returns either the text of the completed events (bytes, no CR, whole blocks with the
        separating blank lines: ``decode_blocks`` turns it into exactly the list ``feed``
        would have returned) or, when the buffer holds a CR or ends in a run of more than two
        LFs, the decoded list from ``feed`` itself. Falsy when no event completed.
        """
        buf = self._buf + data if self._buf else data
        if buf.find(b"\r") < 0:
            end = buf.rfind(b"\n\n")
            if end < 0:
                self._buf = buf
                return b""
            if end == 0 or buf[end - 1] != 0x0A:  # the last separator: `feed` splits here too
                self._buf = buf[end + 2 :]
                return buf[:end]
        self._buf = b""
        return self.feed(buf)

    def flush(self) -> list[bytes]:
        """End of stream: dispatch a final event that lacked its blank line, if any."""
        buf, self._buf = self._buf, b""
        if buf.endswith(b"\r"):
            buf = buf[:-1]
        return decode_blocks(buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n"))


def event_data(block: bytes) -> bytes | None:
    """The joined data lines of one event block, or None when it has none."""
    if block.startswith(b"data: ") and block.find(b"\n") < 0:
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


def decode_blocks(text: bytes) -> list[bytes]:
    """The data of every event in ``text``: whole, CR-free blocks as ``feed_raw`` returns."""
    out: list[bytes] = []
    for block in text.split(b"\n\n"):
        payload = event_data(block)
        if payload is not None:
            out.append(payload)
    return out
