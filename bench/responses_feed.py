"""Benchmark the client's cost per streamed event: Responses API typed events against
chat chunks, per socket read, on the transport's sink (no network, no server).

Run: ``.venv/bin/python bench/responses_feed.py [--events N]``

Four paths over the same number of events, read in 4 KiB and 512 B pieces: chat chunks
through the C walk (``EventFeed``, the default where the extension is built) and through
the Python reference; Responses events (``event: response.output_text.delta`` +
``data: {...}``, as OpenAI writes them) through ``ResponsesFeed`` (bulk count of a read of
compact deltas) and event by event (``EventFeed(native=False)`` on ``ResponsesState``).
Each figure is the best of 5 runs, in ns per event.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import orjson

from loadgen.stream.feed import NATIVE, EventFeed
from loadgen.stream.responses import ResponsesFeed, ResponsesState
from loadgen.stream.state import StreamState

Sink = Callable[[int, bytes], bool]


def _responses(n: int) -> bytes:
    return b"".join(
        b"event: response.output_text.delta\ndata: "
        + orjson.dumps(
            {
                "type": "response.output_text.delta",
                "sequence_number": i,
                "item_id": "msg_0123456789",
                "output_index": 0,
                "content_index": 0,
                "delta": " the",
            }
        )
        + b"\n\n"
        for i in range(n)
    )


def _chat(n: int) -> bytes:
    choice = {"index": 0, "delta": {"content": " the"}, "logprobs": None, "finish_reason": None}
    chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    return b"".join(
        b"data: " + orjson.dumps({**chunk, "choices": [choice]}) + b"\n\n" for _ in range(n)
    )


def _best_ns(make_sink: Callable[[], Sink], reads: list[bytes], events: int) -> float:
    best = float("inf")
    for _ in range(5):
        take = make_sink()
        start = time.perf_counter_ns()
        for i, data in enumerate(reads):
            take(i, data)
        best = min(best, time.perf_counter_ns() - start)
    return best / events


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=20_000, help="Events per stream.")
    n = parser.parse_args().events
    streams = {"chat": _chat(n), "responses": _responses(n)}
    paths: dict[str, tuple[str, Callable[[], Sink]]] = {
        "responses, ResponsesFeed": ("responses", lambda: ResponsesFeed(ResponsesState(0)).take),
        "responses, event by event": (
            "responses",
            lambda: EventFeed(ResponsesState(0), native=False).take,
        ),
        "chat, Python reference": ("chat", lambda: EventFeed(StreamState(0), native=False).take),
    }
    if NATIVE:
        paths["chat, C walk"] = ("chat", lambda: EventFeed(StreamState(0)).take)
    for size in (4096, 512):
        print(f"reads of {size} B:")
        for name, (kind, make) in paths.items():
            body = streams[kind]
            reads = [body[i : i + size] for i in range(0, len(body), size)]
            print(f"  {name:28s} {_best_ns(make, reads, n):8.0f} ns/event")


if __name__ == "__main__":
    main()
