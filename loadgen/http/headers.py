"""HTTP/1.1 headers on the fast transport: the request head, its checks, the response's.

``request_head`` encodes a request line and headers, and refuses (``check_header``) any
header that would not reach the server as one header: a CR, LF or NUL in a value ends the
line early and lets what follows be read as headers of its own. ``RawHeaders`` is a
response's headers as received, decoded only when looked up. Raises httpx's exception
types, as an httpx transport does; imports nothing of ours.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import httpx


class RawHeaders(Mapping[str, str]):
    """A response's headers as received, looked up by name without regard to case (as
    ``httpx.Headers``), decoded only when asked for: a response's few lookups cost less
    than building a header object."""

    __slots__ = ("_raw",)

    def __init__(self, raw: list[tuple[bytes, bytes]]) -> None:
        self._raw = raw

    def get(self, key: str, default: str | None = None) -> str | None:  # type: ignore[override]
        name = key.lower().encode("latin-1")
        for raw_name, value in self._raw:
            if raw_name.lower() == name:
                return value.decode("latin-1")
        return default

    def __getitem__(self, key: str) -> str:
        value = self.get(key)
        if value is None:
            raise KeyError(key)
        return value

    def __iter__(self) -> Iterator[str]:
        return (name.decode("latin-1").lower() for name, _ in self._raw)

    def __len__(self) -> int:
        return len(self._raw)


_TOKEN = re.compile(rb"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")
"""A header name (RFC 9110 ``token``)."""
_NOT_IN_VALUE = re.compile(rb"[\x00-\x08\x0a-\x1f\x7f]")
"""What a header value may not hold (RFC 9110 ``field-value``: visible characters, space,
tab, and bytes above 0x7F): every control byte but tab, CR, LF and NUL first among them."""
_BYTE_NAMES = {0x0D: "CR", 0x0A: "LF", 0x00: "NUL"}


def _byte_name(byte: int) -> str:
    return _BYTE_NAMES.get(byte, f"byte 0x{byte:02X}")


def header_problem(name: bytes, value: bytes) -> str | None:
    """Why this header cannot go on the wire as one header, or None. Names the offending
    byte and its position, never the value: it may be a credential."""
    if not _TOKEN.fullmatch(name):
        return "its name is not an HTTP token"
    bad = _NOT_IN_VALUE.search(value)
    if bad is not None:
        return (
            f"{_byte_name(value[bad.start()])} at position {bad.start()} of its value cannot "
            "be sent (a value takes no control byte but tab; CR, LF or NUL would end it early "
            "and inject what follows)"
        )
    return None


def check_header(name: bytes, value: bytes) -> None:
    """Raise ``httpx.LocalProtocolError`` (as httpx's own transport does, through h11) for
    a header that ``header_problem`` refuses."""
    problem = header_problem(name, value)
    if problem is not None:
        shown = name[:40].decode("latin-1")
        raise httpx.LocalProtocolError(f"header {shown!r}: {problem}: nothing was sent")


def request_head(request: httpx.Request, body: bytes) -> bytes:
    """The request line and headers of ``request``, with Host and Content-Length. Raises
    ``httpx.LocalProtocolError`` for a header that ``check_header`` refuses."""
    target = request.url.raw_path
    lines = [request.method.encode() + b" " + target + b" HTTP/1.1"]
    have_length = False
    for name, value in request.headers.raw:
        check_header(name, value)
        lower = name.lower()
        if lower == b"transfer-encoding":
            continue
        if lower == b"content-length":
            have_length = True
        lines.append(name + b": " + value)
    if not have_length and (body or request.method in ("POST", "PUT", "PATCH")):
        lines.append(b"Content-Length: " + str(len(body)).encode())
    return b"\r\n".join(lines) + b"\r\n\r\n"
