"""Bulk classification of stamped SSE reads: the fast path of ``summarize_stream``.

The client hands over each socket read's bytes as they arrive (``EventFeed.take``, the
transport's sink); the events a read completed (as ``SSEDecoder.feed_raw`` frames them)
are added to the stream's ``StreamState`` at once, with the read's arrival time
(``add_read``; ``summarize_reads`` does the same for a list of reads). Most of a
vLLM-style stream is plain content chunks of one layout, one ``data:`` line each: a run of
them, over one read or (``summarize_reads``) over many consecutive reads joined, is
recognised by one regular-expression pass instead of Python code per event. Every line of
the run must match (a content delta, ``"finish_reason":null`` and, when the run carries
them, the cumulative ``completion_tokens``) and counts over the text prove that the
matches are exactly its lines, so the run adds exactly what ``StreamState.add`` adds
event by event. Everything else (role, reasoning, finish, usage and error chunks,
``[DONE]``, other layouts, multi-line events) goes through ``StreamState.add``, one event
at a time.

Where the package was built with a C compiler, ``loadgen.stream._sse_scan`` does all of it in
one call per read instead (``scan_feed``: framing and classification; ``scan_read``: the
events of a framed text): the plain content runs without Python (about 0.13 µs per event
against 0.4-1 µs for the regex pass), the role, finish, usage and reasoning chunks decoded
by orjson and classified in C, errors and server timings through ``StreamState``'s
methods. The regex path stays for installs without it. Both are tested against the
per-event reference on the same generated streams.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from functools import partial
from itertools import chain, repeat
from typing import NamedTuple

import orjson

from loadgen.openai.chunks import plain_content_tokens
from loadgen.stream.sse import SSEDecoder, decode_blocks, event_data
from loadgen.stream.state import StreamState, StreamSummary

Read = tuple[int, bytes | list[bytes]]
"""One socket read: its arrival time and its completed events, as ``feed_raw`` gave them
(the events' text, or their decoded data)."""

_CHAT_KEY = b'"delta":{"content":"'
_TEXT_KEY = b'"text":"'
_FINISH_KEY = b'"finish_reason":null'
_TOKENS_KEY = b'"completion_tokens":'

# Each piece starts with a byte that is rare in compact JSON (so the search skips ahead
# quickly) and a lookbehind then requires the whole key: each one matches exactly where
# `plain_content_tokens` finds its key.
_CHAT = rb'\{"content":"(?<="delta":\{"content":")(?!")'
_TEXT = rb'xt":"(?<="text":")(?!")'
_FINISH = rb'_reason":null(?<="finish_reason":null)'
_TOKENS = rb'_tokens":(?<="completion_tokens":)(\d{1,19})(?!\d)'
_LINE_END = rb"[^\n]*+(?:\n\ndata: |\Z)"
"""The rest of the line, then the next event's start or the end of the text."""


def _compile(*, chat: bool, content_first: bool, tokens: bool) -> re.Pattern[bytes]:
    content = _CHAT if chat else _TEXT
    first, second = (content, _FINISH) if content_first else (_FINISH, content)
    tail = rb"[^\n]*" + _TOKENS if tokens else rb"()"
    return re.compile(first + rb"[^\n]*" + second + tail + _LINE_END)


_LAYOUTS = {
    (chat, content_first, tokens): _compile(chat=chat, content_first=content_first, tokens=tokens)
    for chat in (True, False)
    for content_first in (True, False)
    for tokens in (True, False)
}
"""One pattern per layout: chat or completions, content before or after the finish reason
(vLLM and OpenAI, or llama.cpp), with or without trailing cumulative usage."""

_AddBlock = Callable[[StreamState, int, bytes], None]
_scan_read: Callable[[StreamState, int, bytes, _AddBlock], None] | None
_scan_feed: Callable[[SSEDecoder, StreamState, _AddBlock, int, bytes], None] | None
try:
    from loadgen.stream._sse_scan import scan_feed as _scan_feed
    from loadgen.stream._sse_scan import scan_read as _scan_read
except ImportError:  # built without a C compiler: the regex path below gives the same result
    _scan_read = _scan_feed = None

_SMALL_TEXT = 512
"""A text shorter than this (a couple of events) alone goes event by event: cheaper."""


def summarize_reads(reads: list[Read], sent_ns: int) -> StreamSummary:
    """``summarize_stream`` of the events of ``reads``, each stamped with its read's time."""
    state = StreamState(sent_ns)
    if _scan_read is not None:
        for ts, got in reads:
            add_read(state, ts, got)
        return state.summary()
    texts: list[tuple[int, bytes]] = []
    for ts, got in reads:
        if isinstance(got, bytes):
            texts.append((ts, got))
        else:
            _add_texts(state, texts)
            texts = []
            for payload in got:
                state.add(ts, payload)
    _add_texts(state, texts)
    return state.summary()


def add_read(state: StreamState, ts: int, got: bytes | list[bytes]) -> None:
    """Add the events one read completed (``got``, as ``feed_raw`` returned it) to
    ``state``: ``summarize_reads`` one read at a time, as the reads arrive."""
    if isinstance(got, bytes):
        scan = _scan_read
        if scan is not None:
            scan(state, ts, got, _add_block)
        else:
            _add_texts(state, [(ts, got)])
    else:
        for payload in got:
            state.add(ts, payload)


class EventFeed:
    """One response body's reads into its ``StreamState``: ``take(ts, data)`` for each
    socket read (the transport's sink), ``finish(ts)`` at the end of the body.

    Each read is framed (``SSEDecoder.feed_raw``) and the events it completed are added with
    its arrival time (``add_read``). Where the C module is built, ``take`` is that module's
    ``scan_feed`` bound to this body's decoder and state: framing and classification in one
    call, with no Python frame per read."""

    __slots__ = ("_decoder", "_state", "take")

    def __init__(self, state: StreamState) -> None:
        self._state = state
        self._decoder = SSEDecoder()
        self.take: Callable[[int, bytes], None] = (
            partial(_scan_feed, self._decoder, state, _add_block)
            if _scan_feed is not None
            else self._take
        )

    def _take(self, ts: int, data: bytes) -> None:
        got = self._decoder.feed_raw(data)
        if got:
            add_read(self._state, ts, got)

    def finish(self, ts: int) -> None:
        """The body ended: a last event that lacked its blank line still counts."""
        tail = self._decoder.flush()
        if tail:
            add_read(self._state, ts, tail)


def _add_block(state: StreamState, ts: int, block: bytes) -> None:
    """One event block the C walk leaves to the decoder's own rules (multi-line data,
    comments, other fields)."""
    payload = event_data(block)
    if payload is not None:
        state.add(ts, payload)


def _add_texts(state: StreamState, texts: list[tuple[int, bytes]]) -> None:
    """Add the events of consecutive reads' texts, in order.

    The texts from the first whose first event is plain content to the last whose last
    event is plain content (the reads of the stream's middle) go as one joined run; those
    before and after (its first and last reads, typically) one by one.
    """
    start, stop = 0, len(texts)
    while start < stop and not _plain(_first_block(texts[start][1])):
        _add_text(state, *texts[start])
        start += 1
    end = stop
    while end > start and not _plain(_last_block(texts[end - 1][1])):
        end -= 1
    _add_joined(state, texts[start:end])
    for ts, text in texts[end:stop]:
        _add_text(state, ts, text)


def _add_text(state: StreamState, ts: int, text: bytes) -> None:
    """Add the events of ``text`` (whole CR-free blocks, as ``feed_raw`` returns), in order.

    In bulk when it can. Else leading and trailing events that are not plain content go
    one by one and the rest is tried again; a run that mostly matched is split in two (to
    isolate a few odd events); anything else goes event by event.
    """
    if len(text) < _SMALL_TEXT:
        _add_each(state, ts, text)
        return
    scan = _scan(text)
    if scan.found is not None:
        _add_plain(state, [(ts, scan.matched)], scan.found, scan.tokens)
        return
    peeled = _peel(state, ts, text)
    if peeled is None:
        return
    start, stop, tail = peeled
    if start or stop < len(text):
        _add_text(state, ts, text[start:stop])
    elif not _add_halves(state, ts, text, scan.mostly()):
        _add_each(state, ts, text)
    for payload in reversed(tail):
        state.add(ts, payload)


def _add_joined(state: StreamState, texts: list[tuple[int, bytes]]) -> None:
    """Add consecutive reads' texts as one run when it is one, with each read's stamp on
    its events; else split the reads in two when most lines matched, else one by one."""
    if len(texts) > 1:
        parts = [text for _, text in texts]
        scan = _scan(b"\n\n".join(parts))
        if scan.found is not None:
            # Every part is whole one-line events: two LFs between consecutive ones.
            lfs = map(bytes.count, parts, repeat(b"\n"))
            counts = [lf // 2 + 1 for lf in lfs]
            stamped = [(ts, n) for (ts, _), n in zip(texts, counts, strict=True)]
            _add_plain(state, stamped, scan.found, scan.tokens)
            return
        if scan.mostly():
            half = len(texts) // 2
            _add_joined(state, texts[:half])
            _add_joined(state, texts[half:])
            return
    for ts, text in texts:
        _add_text(state, ts, text)


def _add_each(state: StreamState, ts: int, text: bytes) -> None:
    for payload in decode_blocks(text):
        state.add(ts, payload)


def _first_block(text: bytes) -> bytes:
    cut = text.find(b"\n\n")
    return text if cut < 0 else text[:cut]


def _last_block(text: bytes) -> bytes:
    cut = text.rfind(b"\n\n")
    return text if cut < 0 else text[cut + 2 :]


def _plain(block: bytes) -> bool:
    """Whether the event of ``block`` is plain content (as ``StreamState.add`` decides)."""
    payload = event_data(block)
    return payload is not None and plain_content_tokens(payload) is not None


def _peel(state: StreamState, ts: int, text: bytes) -> tuple[int, int, list[bytes]] | None:
    """Add the events before the first plain content one; return where the run from it to
    the last plain content one starts and stops, and the data of the events after it (for
    the caller to add after the run). None when no event is plain content (all added)."""
    add = state.add
    start = 0
    while True:
        cut = text.find(b"\n\n", start)
        payload = event_data(text[start:] if cut < 0 else text[start:cut])
        if payload is not None:
            if plain_content_tokens(payload) is not None:
                break
            add(ts, payload)
        if cut < 0:
            return None
        start = cut + 2
    stop = len(text)
    tail: list[bytes] = []
    while True:
        cut = text.rfind(b"\n\n", start, stop)
        if cut < 0:
            break
        payload = event_data(text[cut + 2 : stop])
        if payload is not None:
            if plain_content_tokens(payload) is not None:
                break
            tail.append(payload)
        stop = cut
    return start, stop, tail


def _add_halves(state: StreamState, ts: int, text: bytes, worth_it: bool) -> bool:
    """When ``worth_it``, add ``text`` as two halves split between events; False if not."""
    if not worth_it:
        return False
    cut = text.find(b"\n\n", len(text) // 2)
    if cut < 0:
        cut = text.rfind(b"\n\n")
    if cut <= 0:
        return False
    _add_text(state, ts, text[:cut])
    _add_text(state, ts, text[cut + 2 :])
    return True


def _layout(first: bytes, tokens: bool) -> re.Pattern[bytes] | None:
    """The pattern for the layout of ``first`` (one event line), or None for no known one."""
    content = first.find(_CHAT_KEY)
    chat = content >= 0
    if not chat:
        content = first.find(_TEXT_KEY)
        if content < 0:
            return None
    finish = first.find(_FINISH_KEY)
    if finish < 0 or (tokens and first.find(_TOKENS_KEY) < max(content, finish)):
        return None
    return _LAYOUTS[chat, content < finish, tokens]


class _Scan(NamedTuple):
    """A text matched as one run of plain content lines."""

    matched: int
    """Lines that matched."""
    newlines: int
    found: list[bytes] | None
    """The captured cumulative token counts (empty captures without usage), one per
    line, when every event is a matching line; else None."""
    tokens: bool
    """Whether the lines carry cumulative usage."""

    def mostly(self) -> bool:
        """Whether at least about half of the lines matched: a few odd events."""
        return 0 < 4 * self.matched >= self.newlines


def _scan(text: bytes) -> _Scan:
    """Match ``text`` (whole blocks) as one run of plain content events.

    The pattern's matches never overlap and each ends at the end of its line followed by
    the next event's start (two LFs) or the end of the text; so ``newlines == 2 * (n - 1)``
    for n matches means the text is exactly n one-line ``data: `` events, each matching.
    One ``completion_tokens`` key per matched line makes the captured value the first, as
    ``plain_content_tokens`` reads it. When the first line has no such key, that event
    already makes the tokens per chunk unknown, whatever the others carry.
    """
    if not text.startswith(b"data: ") or text.find(_FINISH_KEY, text.rfind(b"\n") + 1) < 0:
        return _Scan(0, 0, None, False)  # the last event is something else ([DONE], say)
    eol = text.find(b"\n")
    first = text if eol < 0 else text[:eol]
    tokens = first.find(_TOKENS_KEY) >= 0  # `find`, not `in`: see loadgen.stream.sse
    pattern = _layout(first, tokens)
    if pattern is None:
        return _Scan(0, 0, None, tokens)
    found = pattern.findall(text)
    n = len(found)
    newlines = len(text) - len(text.replace(b"\n", b""))
    if newlines != 2 * (n - 1) or (tokens and text.count(_TOKENS_KEY) != n):
        return _Scan(n, newlines, None, tokens)
    return _Scan(n, newlines, found, tokens)


def _add_plain(
    state: StreamState, counts: list[tuple[int, int]], found: list[bytes], tokens: bool
) -> None:
    """Add a matched run (``_Scan.found``): ``counts`` has each read's stamp and its number
    of events."""
    if state.first_token is None:
        state.first_token = counts[0][0]
    sent_ns = state.sent_ns
    content = state.content
    for ts, n in counts:
        content += [(ts - sent_ns) // 1000] * n
    if tokens:
        values = _ints(found)
        state.tokens += map(operator.sub, values, chain((state.last_completion,), values))
        state.last_completion = values[-1]
    else:
        state.tokens_known = False


def _ints(digits: list[bytes]) -> list[int]:
    """``[int(d) for d in digits]`` for runs of at most 19 digits (so below 2**64: orjson
    reads them as ints), parsed as one JSON array: about twice as fast. ``int`` itself
    where JSON reads otherwise (leading zeros are an error there)."""
    try:
        values: list[int] = orjson.loads(b"[" + b",".join(digits) + b"]")
    except orjson.JSONDecodeError:
        return list(map(int, digits))
    return values
