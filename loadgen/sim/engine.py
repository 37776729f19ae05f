"""The engine seam: given a parsed request, yield when to emit how many tokens, and the truth.

An :class:`Engine` turns one :class:`~loadgen.sim.request.SimRequest` into an async stream of
:class:`Emission` events, each yielded *at* its due instant (the engine owns time: a batching
engine only knows a token's time once its step has run). Every emission carries the engine's
ground-truth phase durations (:class:`Phases`). The HTTP layer only formats and writes.

v0 is :class:`FixedDelayEngine`: every request is independent of every other. Its content
chunk ``j`` is due at::

    received_ns + ttft_ns + j * itl_ns * tokens_per_chunk   (+ stall_ns once past the stall)

with ``ttft_ns = ttft_ms + prefill_us_per_token * prompt_tokens``; every due time comes from
the one ``received_ns``, so lateness never accumulates. A later physics engine (continuous
batching, monolith or prefill/decode disaggregated, timed by ``analyzers.budget``) implements
the same protocol, with a step loop run inside :meth:`Engine.running`.

Phase semantics (the simulator's ground truth, all in ns):

- ``queue``: received until admitted to a batch (0 in v0);
- ``prefill``: admitted until the first token's decode step starts; in v0 the prompt-
  proportional part plus ``ttft_ms`` minus ``first_token`` (below);
- ``transfer``: KV-cache transfer from a prefill to a decode instance (0 in v0, monolith);
- ``first_token``: the decode step that produces the first token; in v0 one inter-token
  latency, ``min(itl_ms, ttft_ms)``, so that ``queue + prefill + transfer + first_token`` is
  exactly the planned time to first chunk.

Must not import the replay client (loadgen.client/replay/transport/recorder).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator, Mapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from typing import Protocol

from loadgen.sim.config import SimConfig
from loadgen.sim.deadline import DeadlineTimer, make_deadline_timer
from loadgen.sim.request import SimRequest


@dataclass(frozen=True, slots=True, kw_only=True)
class Phases:
    """Ground truth of one request known at its first token: phase durations in model ns,
    the prompt tokens the prefix cache supplied, and which instances served it (None: the
    engine's own ``instance``)."""

    queue_ns: int
    prefill_ns: int
    transfer_ns: int
    first_token_ns: int
    cached_tokens: int = 0
    instance: str | None = None
    prefill_instance: str | None = None
    decode_wait_ns: int = 0
    """Disaggregated: the KV's arrival on the decode instance to its first step with the
    request (``first_token_ns`` is then that step)."""

    @property
    def planned_ttft_ns(self) -> int:
        """Received to first token, as the engine planned it."""
        before = self.queue_ns + self.prefill_ns + self.transfer_ns + self.decode_wait_ns
        return before + self.first_token_ns


@dataclass(frozen=True, slots=True, kw_only=True)
class Emission:
    """One content chunk's worth of tokens, yielded by the engine at ``due_ns``."""

    index: int
    """0-based chunk index within the request."""
    first_token: int
    """0-based index, within the completion, of this chunk's first token."""
    tokens: int
    """Tokens in this chunk (>= 1)."""
    due_ns: int
    """The ``perf_counter_ns`` instant the engine scheduled this chunk for."""
    last: bool
    """Whether this chunk completes the request."""
    phases: Phases


@dataclass(frozen=True, slots=True, kw_only=True)
class Stall:
    """A pause injected into one request: every chunk from ``from_chunk`` on is late by it."""

    from_chunk: int
    stall_ns: int


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineLoad:
    """Requests the engine holds now."""

    running: int
    waiting: int


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceStats:
    """What ``/metrics`` reports of one instance (vLLM's ``engine`` label is ``name``)."""

    name: str
    running: int
    waiting: int
    kv_usage: float = 0.0
    prefix_queries: int = 0
    prefix_hits: int = 0
    preemptions: int = 0


class Engine(Protocol):
    """The seam between the HTTP layer and the simulated inference engine."""

    @property
    def instance(self) -> str:
        """The replica's name, reported as ``metrics.instance``."""

    @property
    def time_scale(self) -> float:
        """Wall seconds per model second; every reported time is in model time."""

    def load(self) -> EngineLoad:
        """How many requests run and wait now."""

    def stats(self) -> Sequence[InstanceStats]:
        """Per-instance state for ``/metrics``."""

    def prepare(self, request: SimRequest, body: Mapping[str, object]) -> SimRequest:
        """The request as this engine counts it (prompt tokens, cache keys); raises
        :class:`~loadgen.errors.RequestError` for one it can never serve."""

    def running(self) -> AbstractAsyncContextManager[None]:
        """Scope in which the engine serves (owns its timers and any step loop)."""

    def generate(
        self, request: SimRequest, *, received_ns: int, stall: Stall | None = None
    ) -> AsyncGenerator[Emission, None]:
        """Yield the request's emissions, each at its due time; closing it aborts the request."""


class FixedDelayEngine:
    """v0: fixed time to first token, fixed inter-token latency, no interference."""

    def __init__(self, config: SimConfig, *, timer: DeadlineTimer | None = None) -> None:
        self._config = config
        self._timer = timer if timer is not None else make_deadline_timer()
        self._running = 0

    @property
    def instance(self) -> str:
        return self._config.instance

    @property
    def time_scale(self) -> float:
        return 1.0

    def load(self) -> EngineLoad:
        return EngineLoad(running=self._running, waiting=0)

    def stats(self) -> list[InstanceStats]:
        return [InstanceStats(name=self.instance, running=self._running, waiting=0)]

    def prepare(self, request: SimRequest, body: Mapping[str, object]) -> SimRequest:
        return request

    @asynccontextmanager
    async def _scope(self) -> AsyncIterator[None]:
        self._timer.open()
        try:
            yield
        finally:
            self._timer.close()

    def running(self) -> AbstractAsyncContextManager[None]:
        return self._scope()

    def phases(self, prompt_tokens: int) -> Phases:
        """The planned phases of a request with ``prompt_tokens`` tokens of prompt."""
        cfg = self._config
        fixed = cfg.fixed_ttft_ns
        first_token = min(round(cfg.itl_ms * 1e6), fixed)
        return Phases(
            queue_ns=0,
            prefill_ns=cfg.prefill_ns(prompt_tokens) + fixed - first_token,
            transfer_ns=0,
            first_token_ns=first_token,
        )

    async def generate(
        self, request: SimRequest, *, received_ns: int, stall: Stall | None = None
    ) -> AsyncGenerator[Emission, None]:
        cfg = self._config
        phases = self.phases(request.prompt_tokens)
        first_due = received_ns + phases.planned_ttft_ns
        interval = cfg.chunk_interval_ns
        per_chunk = cfg.tokens_per_chunk
        chunks = -(-request.max_tokens // per_chunk)
        self._running += 1
        try:
            for index in range(chunks):
                due = first_due + index * interval
                if stall is not None and index >= stall.from_chunk:
                    due += stall.stall_ns
                await self._timer.sleep_until(due)
                first = index * per_chunk
                yield Emission(
                    index=index,
                    first_token=first,
                    tokens=min(per_chunk, request.max_tokens - first),
                    due_ns=due,
                    last=index == chunks - 1,
                    phases=phases,
                )
        finally:
            self._running -= 1


@dataclass(frozen=True, slots=True, kw_only=True)
class GroundTruth:
    """What the simulator reports as a response's top-level ``metrics`` object.

    Our keys, floats in ms: ``queue_ms``, ``prefill_ms``, ``transfer_ms``, ``decode_wait_ms``
    (disaggregated: the KV's arrival to the decode instance's first step with the request)
    and ``first_token_ms`` add up to ``ttft_ms``, the *measured* time from the request
    body's receipt to the write of the first content chunk (stamped as its ``send``
    starts; ``first_token_ms`` absorbs whatever the write trailed the plan by, and
    ``slip_ms`` states the worst chunk's lateness, to its ``send``'s return, on its own);
    ``decode_ms`` is first to last content chunk write.
    vLLM's per-request keys (``--enable-per-request-metrics``, vLLM PR #46768) are derived:
    ``time_to_first_token_ms`` = ttft, ``queue_time_ms`` = queue, ``generation_time_ms`` =
    decode, ``mean_itl_ms`` = decode / (completion_tokens - 1), ``tokens_per_second`` =
    completion_tokens / (ttft + decode).
    """

    queue_ms: float
    prefill_ms: float
    transfer_ms: float
    first_token_ms: float
    ttft_ms: float
    decode_ms: float
    completion_tokens: int
    instance: str
    cached_tokens: int = 0
    prefill_instance: str | None = None
    decode_wait_ms: float = 0.0
    slip_ms: float = 0.0
    """The simulator's own lateness: the worst chunk's ``send`` completion after its planned
    time, in *wall* ms (not model time). The other terms are the plan and the measured
    first/last writes; this says how far the writes trailed the plan."""

    @classmethod
    def measure(
        cls,
        phases: Phases,
        *,
        received_ns: int,
        first_ns: int,
        last_ns: int,
        completion_tokens: int,
        instance: str,
        time_scale: float = 1.0,
        slip_ns: int = 0,
    ) -> GroundTruth:
        """Combine the engine's planned phases with the measured first and last writes."""
        ttft_ns = (first_ns - received_ns) / time_scale
        before_first = (
            phases.queue_ns + phases.prefill_ns + phases.transfer_ns + phases.decode_wait_ns
        )
        return cls(
            queue_ms=phases.queue_ns / 1e6,
            prefill_ms=phases.prefill_ns / 1e6,
            transfer_ms=phases.transfer_ns / 1e6,
            decode_wait_ms=phases.decode_wait_ns / 1e6,
            first_token_ms=(ttft_ns - before_first) / 1e6,
            ttft_ms=ttft_ns / 1e6,
            decode_ms=(last_ns - first_ns) / time_scale / 1e6,
            completion_tokens=completion_tokens,
            instance=phases.instance or instance,
            cached_tokens=phases.cached_tokens,
            prefill_instance=phases.prefill_instance,
            slip_ms=max(0, slip_ns) / 1e6,
        )

    def as_json(self) -> dict[str, float | int | str]:
        """The ``metrics`` object, our keys first, then vLLM's."""
        total_s = (self.ttft_ms + self.decode_ms) / 1e3
        itl = self.decode_ms / (self.completion_tokens - 1) if self.completion_tokens > 1 else 0.0
        extra: dict[str, float | int | str] = {"cached_tokens": self.cached_tokens}
        if self.prefill_instance is not None:
            extra["prefill_instance"] = self.prefill_instance
        return {
            "queue_ms": self.queue_ms,
            "prefill_ms": self.prefill_ms,
            "transfer_ms": self.transfer_ms,
            "decode_wait_ms": self.decode_wait_ms,
            "first_token_ms": self.first_token_ms,
            "ttft_ms": self.ttft_ms,
            "decode_ms": self.decode_ms,
            "instance": self.instance,
            "slip_ms": self.slip_ms,
            **extra,
            "time_to_first_token_ms": self.ttft_ms,
            "queue_time_ms": self.queue_ms,
            "generation_time_ms": self.decode_ms,
            "mean_itl_ms": itl,
            "tokens_per_second": self.completion_tokens / total_s if total_s > 0 else 0.0,
        }
