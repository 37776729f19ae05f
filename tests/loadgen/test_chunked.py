"""The C decoder of chunked bodies (``loadgen.http._chunked``) against httptools (llhttp) on the
same bytes, split at the same points: valid bodies of every shape, and the same bodies
corrupted or cut anywhere."""

from __future__ import annotations

import itertools

import httptools
import pytest
from fuzzsize import examples
from hypothesis import given, settings
from hypothesis import strategies as st

# Without the module (no compiler) these skip; test_c_extensions fails if it could be built.
chunked = pytest.importorskip("loadgen.http._chunked")
HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


class _Body:
    def __init__(self) -> None:
        self.pieces: list[bytes] = []
        self.done = False

    def on_body(self, data: bytes) -> None:
        self.pieces.append(data)

    def on_message_complete(self) -> None:
        self.done = True


def by_httptools(reads: list[bytes]) -> tuple[bytes, bool, bool]:
    """(body, done, failed) as llhttp decodes the reads after a chunked head. Bytes after
    the end of the body are not this decoder's business (llhttp parses them as the next
    response; the transport closes the connection): failing on them does not count. The
    body llhttp gave before a fault is kept, as the transport keeps it (the read that holds
    the fault too)."""
    body = _Body()
    parser = httptools.HttpResponseParser(body)
    parser.feed_data(HEAD)
    for data in reads:
        try:
            parser.feed_data(data)
        except httptools.HttpParserError:
            return b"".join(body.pieces), body.done, not body.done
        if body.done:
            break
    return b"".join(body.pieces), body.done, False


def by_dechunker(reads: list[bytes]) -> tuple[bytes, bool, bool]:
    dec = chunked.Dechunker()
    out: list[bytes] = []
    for data in reads:
        out.append(dec.feed(data))
        if dec.done or dec.error is not None:
            break
    return b"".join(out), dec.done, dec.error is not None


def split(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted(c for c in cuts if 0 <= c <= len(data)), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


TOKEN = st.text(alphabet="abcXYZ019!#$%&'*+-.^_`|~", min_size=1, max_size=4)
QUOTED = st.text(alphabet=st.sampled_from(list('ab ;="\\\t')), max_size=5).map(
    lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'
)


@st.composite
def extension(draw: st.DrawFn) -> bytes:
    parts = []
    for _ in range(draw(st.integers(0, 2))):
        name = draw(TOKEN)
        value = draw(st.one_of(st.none(), TOKEN, QUOTED))
        parts.append(";" + name + ("" if value is None else "=" + value))
    return "".join(parts).encode()


@st.composite
def chunked_body(draw: st.DrawFn) -> tuple[bytes, bytes]:
    """(encoded, payload): a valid chunked body with sizes in any case and zero padding,
    extensions, and trailers."""
    payload = draw(st.binary(max_size=200))
    sizes = draw(st.lists(st.integers(1, 60), max_size=8))
    out = b""
    pos = 0
    for n in [*sizes, len(payload)]:
        part = payload[pos : pos + n]
        pos += len(part)
        if not part:
            continue
        size = f"{len(part):x}"
        size = size.upper() if draw(st.booleans()) else size
        size = "0" * draw(st.integers(0, 2)) + size
        out += size.encode() + draw(extension()) + b"\r\n" + part + b"\r\n"
        if pos >= len(payload):
            break
    out += b"0" + draw(extension()) + b"\r\n"
    for _ in range(draw(st.integers(0, 2))):
        out += draw(TOKEN).encode() + b": " + draw(st.sampled_from([b"v", b"", b"a b\tc"]))
        out += b"\r\n"
    return out + b"\r\n", payload


@settings(max_examples=examples(500), deadline=None)
@given(body=chunked_body(), cuts=st.lists(st.integers(0, 400), max_size=6))
def test_valid_bodies_decode_as_httptools_decodes_them(
    body: tuple[bytes, bytes], cuts: list[int]
) -> None:
    encoded, payload = body
    reads = split(encoded, cuts)
    assert by_httptools(reads) == (payload, True, False)
    assert by_dechunker(reads) == (payload, True, False)


CORRUPTIONS = [b" ", b"\r", b"\n", b";", b"=", b'"', b"x", b"G", b"0", b"\x00", b":", b"\\"]


@settings(max_examples=examples(1500), deadline=None)
@given(
    body=chunked_body(),
    at=st.integers(0, 400),
    how=st.integers(0, 2),
    byte=st.sampled_from(CORRUPTIONS),
    cuts=st.lists(st.integers(0, 400), max_size=4),
)
def test_corrupted_bodies_fail_where_httptools_fails(
    body: tuple[bytes, bytes], at: int, how: int, byte: bytes, cuts: list[int]
) -> None:
    """A byte inserted, replaced or removed anywhere, or the body cut short: both accept
    it (with the same body) or both reject it, with the same body bytes before."""
    encoded, _ = body
    at = min(at, len(encoded))
    if how == 0:
        bad = encoded[:at] + byte + encoded[at:]
    elif how == 1:
        bad = encoded[:at] + byte + encoded[at + 1 :]
    else:
        bad = encoded[:at] + encoded[at + 1 :]
    reads = split(bad, cuts)
    assert by_dechunker(reads) == by_httptools(reads)


EXTENSIONS = [
    *(b";;", b";=", b";=x", b";a=", b";a=;", b';a=""', b';a="x"y', b';a="x";b', b";a=b=c"),
    *(b';"q"', b';a="\x01"', b';a="\\\x01"', b';a="\xff"', b";\xff", b";a=\xff", b";a\t"),
    *(b";", b";a;", b";a=b;", b';a="x";', b';a="\\\t"', b";=;", b';=""', b';a="\\\xff"'),
    *(b';a="\\\x7f"', b';a="\x7f"', b';a="\\"', b';a="x\\"y"', b';a="\t"'),
    *(b';a=x""', b';a=x"y"', b';a=x"', b";;a", b";;;a", b';a=""x', b';a=x";', b';a=x"a"b'),
    *(b";a=;b", b";a=;", b";a=;;b", b";a=b;;c", b";a=b;", b';a="";b', b';a="";', b";=;b"),
]
TRAILERS = [
    *(b"a:\r\n", b"a: \x01\r\n", b"a: \xff\r\n", b"a b: x\r\n", b":x\r\n", b"a\r\n"),
    *(b"a:x\r\n\tfold\r\n", b"a\x00: x\r\n", b"a: x\x7f\r\n", b"a:\t\r\n", b"a:  x  \r\n"),
    *(b"a:\r\nb:\r\n", b"a:x\ny\r\n", b"a:\x00\r\n", b"a:\t\x01\r\n"),
]


@pytest.mark.parametrize(
    "body",
    [
        b"FFFFFFFFFFFFFFFF\r\nhello",  # the largest size llhttp takes: data still to come
        b"FFFFFFFFFFFFFFFFF\r\nhello\r\n",  # 2**64: overflow
        b"5 \r\nhello\r\n0\r\n\r\n",
        b"\r\nhello\r\n0\r\n\r\n",
        b"5\nhello\r\n0\r\n\r\n",
        b"5\r\nhelloX\r\n0\r\n\r\n",
        b"5\r\nhello\r\n0\r\n\n",
        b"5\r\nhello\r\n0\r\nbad trailer\r\n\r\n",
        b"5;a b\r\nhello\r\n0\r\n\r\n",
        b'5;a="x\r\nhello\r\n',
        b"5\r\nhelloX\n0\r\n\r\n",  # a byte where the CR after the data belongs
        b"5\r\nhello\rX0\r\n\r\n",
        b"5\rXhello\r\n0\r\n\r\n",
        b"5\r\nhello\r\n0\r\nX: y\rZ\r\n\r\n",
        b"5\r\nhello\r\n0\r\n\rX",
        *(b"1" + ext + b"\r\nX\r\n0\r\n\r\n" for ext in EXTENSIONS),
        *(b"1\r\nX\r\n0\r\n" + field + b"\r\n" for field in TRAILERS),
    ],
)
def test_edge_cases_agree_with_httptools(body: bytes) -> None:
    for cuts in ([], [1], [len(body) // 2], list(range(len(body)))):
        reads = split(body, cuts)
        assert by_dechunker(reads) == by_httptools(reads), cuts


def test_bytes_after_the_body_are_counted_not_decoded() -> None:
    dec = chunked.Dechunker()
    assert dec.feed(b"3\r\nabc\r\n0\r\n\r\nHTTP/1.1") == b"abc"
    assert dec.done
    assert dec.leftover == len(b"HTTP/1.1")
    assert dec.feed(b" 200") == b""
    assert dec.leftover == len(b"HTTP/1.1 200")


@settings(max_examples=examples(500), deadline=None)
@given(
    data=st.lists(st.sampled_from([b"0", b"1", b"a", b"F", b";", b"=", b'"', b"\r\n", b"x"]))
    .map(b"".join)
    .filter(bool),
    cuts=st.lists(st.integers(0, 60), max_size=4),
)
def test_arbitrary_bytes_agree_with_httptools(data: bytes, cuts: list[int]) -> None:
    reads = split(data, cuts)
    assert by_dechunker(reads) == by_httptools(reads)


def test_a_fault_keeps_the_body_before_it_in_the_same_read() -> None:
    """Issue 19: two good chunks and a bad size line in one read gave nothing at all."""
    dec = chunked.Dechunker()
    assert dec.error is None
    assert dec.feed(b"3\r\nabc\r\n2\r\nde\r\nzz\r\n") == b"abcde"
    assert dec.error == "invalid character in chunk size"
    assert not dec.done
    assert dec.feed(b"1\r\nf\r\n0\r\n\r\n") == b""  # nothing is decoded after a fault
    assert dec.error == "invalid character in chunk size"
