"""What ``analyze`` returns (``Analysis``: the run's and each class's ``ClassSummary``, with
their ``MetricStats``, outcomes, fidelity and cache depth) and what it is asked
(``AnalysisOptions``); ``METRICS`` names the latency metrics it reports. The expected
cached tokens beside the reported ones are :mod:`analyzers.cache`'s.

Computed by :mod:`analyzers.metrics`. Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from analyzers import exprs as e
from analyzers import goodput as g
from analyzers.cache import CacheBasis, CacheOptions, CacheTokens
from analyzers.frames import (
    RowSelection,
    RunHealth,
)
from analyzers.throughput import (
    ThroughputWindow,
)
from analyzers.validity import RunValidity, ValidityThresholds

DEFAULT_PERCENTILES: Final = (50.0, 90.0, 95.0, 99.0, 99.9)


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricSpec:
    """A per-request (or per-token) metric: its column, display name and unit."""

    key: str
    name: str
    unit: str


METRICS: Final = (
    MetricSpec(key=e.TTFT_MS, name="TTFT", unit="ms"),
    MetricSpec(key=e.TTFT_FROM_DUE_MS, name="TTFT from due", unit="ms"),
    MetricSpec(key=e.TTFB_MS, name="Time to first byte", unit="ms"),
    MetricSpec(key=e.TTFR_MS, name="Time to first reasoning", unit="ms"),
    MetricSpec(key=e.TPOT_MS, name="TPOT", unit="ms"),
    MetricSpec(key=e.ITL_MS, name="ITL", unit="ms"),
    MetricSpec(key=e.E2E_MS, name="E2E", unit="ms"),
    MetricSpec(key=e.SCHEDULE_LAG_MS, name="Schedule lag", unit="ms"),
)
REQUEST_METRICS: Final = tuple(m for m in METRICS if m.key != e.ITL_MS)


@dataclass(frozen=True, slots=True, kw_only=True)
class PercentileValue:
    """The value of one percentile (None over no samples)."""

    percentile: float
    value: float | None


@dataclass(frozen=True, slots=True, kw_only=True)
class MetricStats:
    """Count, mean, max and exact percentiles of one metric, in ``unit``."""

    key: str
    name: str
    unit: str
    count: int
    mean: float | None
    max: float | None
    percentiles: tuple[PercentileValue, ...]

    def value(self, percentile: float) -> float | None:
        """The value at ``percentile`` (None when not computed or no samples)."""
        for pv in self.percentiles:
            if pv.percentile == percentile:
                return pv.value
        return None


@dataclass(frozen=True, slots=True, kw_only=True)
class OutcomeCount:
    """Requests with one outcome and their share of the class."""

    outcome: str
    count: int
    fraction: float


@dataclass(frozen=True, slots=True, kw_only=True)
class Fidelity:
    """Requested against reported prompt (and cached) tokens, over requests with usage."""

    requests: int
    requested_tokens_mean: float | None
    reported_tokens_mean: float | None
    ratio_median: float | None
    abs_error_median: float | None
    cached_tokens_mean: float | None
    cached_fraction_mean: float | None
    """Mean of per-request ``cached/prompt`` fractions: small prompts weigh as much as huge
    ones, so this is not the cache's share of the work; see ``cached_share``."""
    cached_share: float | None = None
    """Token-weighted: sum of cached tokens / sum of reported prompt tokens (requests with
    a non-empty reported prompt); None without any."""
    cached_reported: int = 0
    """Requests whose usage reported cached tokens at all (0: the server does not say)."""
    expected: CacheTokens | None = None
    """Expected (the trace's prefixes) against reported cached tokens, over the requests
    with an expectation (None: not asked, no trace, or no such request)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CacheDepth:
    """Reported prefix-cache reuse of the session turns at one depth (1: a session's first
    turn), token-weighted: ``cached_tokens / prompt_tokens`` summed over its requests."""

    turn: int
    requests: int
    prompt_tokens: int
    cached_tokens: int
    share: float
    expected: CacheTokens | None = None
    """Expected against reported over the depth's requests with an expectation."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCalls:
    """The ok requests that answered with a tool call (``tool_call_chunks`` > 0: a chat
    stream with ``delta.tool_calls``), among those whose stream was read for them (the
    column not null)."""

    requests: int
    """Ok requests whose tool-call chunks were counted (chat and completions streams)."""
    calls: int
    """Of those, the ones that answered with a tool call."""
    share: float
    """``calls / requests``."""
    tokens: int
    """Output tokens received in the tool-call replies (``exprs.content_tokens``)."""
    tokens_mean: float | None
    """Mean output tokens of a tool-call reply."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClassSummary:
    """Everything about one workload class (``exprs.ALL``: the whole run)."""

    workload: str
    requests: int
    ok: int
    outcomes: tuple[OutcomeCount, ...]
    error_rate: float
    duration_s: float
    requests_per_s: float
    output_tokens: int
    output_tokens_per_s: float
    total_tokens_per_s: float
    metrics: tuple[MetricStats, ...]
    fidelity: Fidelity
    goodput: g.Goodput | None
    embeddings: int = 0
    """Requests sent to ``/v1/embeddings``: no tokens stream back, so TTFT, TPOT and ITL
    have no samples from them; their latency is E2E, their rate ``items_per_s``."""
    items: int = 0
    """Embeddings returned by ok requests (the ``items`` column)."""
    items_per_s: float = 0.0
    input_tokens_per_s: float = 0.0
    """Prompt tokens of ok requests (reported, else requested) per second."""
    tool_calls: ToolCalls | None = None
    """The replies that were tool calls; None when none was (or none could be counted)."""

    @property
    def embeddings_only(self) -> bool:
        """Every request of the class went to ``/v1/embeddings``."""
        return self.requests > 0 and self.embeddings == self.requests

    def metric(self, key: str) -> MetricStats:
        """The stats of metric ``key`` (an ``exprs`` column name, e.g. ``exprs.TTFT_MS``)."""
        for m in self.metrics:
            if m.key == key:
                return m
        raise KeyError(key)


@dataclass(frozen=True, slots=True, kw_only=True)
class AnalysisOptions:
    """What ``analyze`` computes. ``window_s`` None: about 30 windows over the run."""

    percentiles: tuple[float, ...] = DEFAULT_PERCENTILES
    by_workload: bool = True
    selection: RowSelection = field(default_factory=RowSelection)
    slo: g.SLOTargets = field(default_factory=g.SLOTargets)
    window_s: float | None = None
    thresholds: ValidityThresholds = field(default_factory=ValidityThresholds)
    cache: CacheOptions | None = None
    """Compute each request's expected cached tokens from the trace (None: do not)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Analysis:
    """The result of ``analyze``: the run, its classes, windows and validity."""

    run: str
    options: AnalysisOptions
    overall: ClassSummary
    classes: tuple[ClassSummary, ...]
    window_s: float
    windows: tuple[ThroughputWindow, ...]
    health: RunHealth
    validity: RunValidity
    cache_by_turn: tuple[CacheDepth, ...] = ()
    """Cache reuse per turn depth over requests with a ``session_id`` (empty without any)."""
    cache_basis: CacheBasis | None = None
    """What the expected cached tokens rest on, or why there are none (None: not asked)."""
