"""Server-side record of every request's timing, for tests: bounded, keyed by X-Request-Id.

All instants are ``time.perf_counter_ns()`` values (CLOCK_MONOTONIC on Linux, comparable
across processes on one machine). Must not import the replay client
(loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from collections import OrderedDict

import orjson


class RequestRecord:
    """What the server did for one request; appended to while the response is written."""

    __slots__ = (
        "chunk_due_ns",
        "chunk_sent_ns",
        "chunk_tokens",
        "chunk_write_ns",
        "headers_ns",
        "outcome",
        "prompt_tokens",
        "received_ns",
        "request_id",
        "slip_ns",
    )

    def __init__(self, request_id: str, *, received_ns: int, prompt_tokens: int) -> None:
        self.request_id = request_id
        self.received_ns = received_ns
        self.prompt_tokens = prompt_tokens
        self.headers_ns: int | None = None
        self.chunk_write_ns: list[int] = []
        self.chunk_tokens: list[int] = []
        self.chunk_due_ns: list[int] = []
        self.chunk_sent_ns: list[int] = []
        """When each content chunk's ``send`` returned: the bytes were with the transport
        (written to the socket, or queued there behind earlier ones)."""
        self.slip_ns = 0
        """The worst lateness so far of a chunk against its plan: ``sent - due`` (wall ns)."""
        self.outcome = "running"

    def chunk(self, write_ns: int, tokens: int, due_ns: int | None = None) -> None:
        """Note one content chunk, stamped immediately before its ``send``, and the instant
        the engine scheduled it for (streaming only)."""
        self.chunk_write_ns.append(write_ns)
        self.chunk_tokens.append(tokens)
        if due_ns is not None:
            self.chunk_due_ns.append(due_ns)

    def sent(self, sent_ns: int) -> None:
        """Note that the latest chunk's ``send`` returned at ``sent_ns``; its lateness
        against plan (streaming: the engine's due time) raises ``slip_ns``."""
        self.chunk_sent_ns.append(sent_ns)
        if len(self.chunk_due_ns) == len(self.chunk_sent_ns):
            self.slip_ns = max(self.slip_ns, sent_ns - self.chunk_due_ns[-1])

    def to_json(self) -> bytes:
        """The record as served by ``GET /debug/requests/{id}``."""
        return orjson.dumps(
            {
                "request_id": self.request_id,
                "received_ns": self.received_ns,
                "headers_ns": self.headers_ns,
                "prompt_tokens": self.prompt_tokens,
                "chunk_write_ns": self.chunk_write_ns,
                "chunk_tokens": self.chunk_tokens,
                "chunk_due_ns": self.chunk_due_ns,
                "chunk_sent_ns": self.chunk_sent_ns,
                "slip_ns": self.slip_ns,
                "outcome": self.outcome,
            }
        )


class RequestLog:
    """The last ``capacity`` records, oldest evicted first; a reused id replaces its record."""

    def __init__(self, capacity: int) -> None:
        self._capacity = capacity
        self._records: OrderedDict[str, RequestRecord] = OrderedDict()

    def start(self, request_id: str, *, received_ns: int, prompt_tokens: int) -> RequestRecord:
        """Open the record of a request whose body was fully received at ``received_ns``."""
        record = RequestRecord(request_id, received_ns=received_ns, prompt_tokens=prompt_tokens)
        self._records.pop(request_id, None)
        self._records[request_id] = record
        while len(self._records) > self._capacity:
            self._records.popitem(last=False)
        return record

    def get(self, request_id: str) -> RequestRecord | None:
        """The record of ``request_id``, or None if unknown or evicted."""
        return self._records.get(request_id)

    def __len__(self) -> int:
        return len(self._records)
