"""TTFT decomposition, per request: the client chain and the server split, as one frame.

For every ok request with a first content token, ``first_token - due`` is split into::

    client_delay  sent - due                         (the generator's lateness)
    connect       connected - sent                   (pool wait + TCP/TLS; 0 when reused)
    write         request_written - (connected | sent)
    network       round trip on the wire             ┐
    queue         waiting in the server              │ first_token - request_written
    prefill       computing the uncached prompt      │ (the server split)
    transfer      KV transfer (disaggregated)        │
    first_token   the decode step of the first token ┘

Server terms come from the server's own timings where reported (and not hidden), the
network then being ``(first_token - request_written) - server_ttft``. Otherwise they are
predicted by the budget model, optionally calibrated on the run's low-load requests: by
default at the run's own load, replaying every served request through the engine's
batching policy (``analyzers.decompose.load``: a prompt's prefill stretched over the
steps it shares, the KV link's queue, the decode batch's step for the first token); with
``load_aware=False`` (or when the replay cannot run) at batch 1 (prefill of ``prompt -
cached`` tokens, one decode step for the first token or none, the KV transfer over the
budget's link or none). The network is each request's own (``_request_network``: the
server's TTFT subtracted, else its response head read before its first token, else its
fresh connection's handshake, else the run's estimate), and the queue is the remainder,
clamped at 0; a negative remainder is kept as ``overshoot_ms`` (<= 0) so the parts still
add up. No term is ever negative: a server-reported term below 0 (or a network the
server's TTFT makes negative) is null, "unidentified", and ``RequestTerms.unidentified``
says for how many requests and why. The ``budget_*`` columns stay the batch-1 budget,
except the queue's, which is the replay's predicted queue (null without a replay). The
budget model the predictions come from is ``analyzers.decompose.model``'s
``BudgetModel``. With ``calibrate`` and no chunk size in the deployment, the chunk size
is fitted from the run too (``_fit_chunk``).

The network is never negative. Where the server's own TTFT exceeds what the client saw
between writing the request and its first token (``first_token - request_written <
server_ttft``: the server's clock started before the request was fully written, clock
skew, or a simulator's time scale not applied), the network cannot be
identified: its term is null, the request is marked ``NETWORK_UNIDENTIFIED``, the rest
is split as if it were 0 and the excess goes to ``overshoot_ms`` (<= 0) so the
identified parts still add up.

Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Final, Literal

import polars as pl

from analyzers import exprs as e
from analyzers.budget.calibrate import (
    Calibration,
    PrefillSample,
    calibrate_prefill,
    calibrated,
)
from analyzers.budget.decode import decode_step_time_s
from analyzers.budget.kv import kv_transfer_time_s
from analyzers.budget.prefill import prefill_time_s
from analyzers.budget.specs import Deployment
from analyzers.decompose.load import (
    ROW,
    SECOND_COL,
    empty_phases,
    load_aware_phases,
    predict_phases,
)
from analyzers.decompose.model import BudgetModel
from analyzers.errors import AnalyzerError, BudgetError
from analyzers.frames import RowSelection, scan_run, select_rows
from analyzers.validity import ValidityThresholds
from traces import schema as s

CLIENT_TERMS: Final = ("client_delay", "connect", "write")
SERVER_TERMS: Final = ("network", "queue", "prefill", "transfer", "first_token")
TERMS: Final = CLIENT_TERMS + SERVER_TERMS
"""Every term, in chain order; column ``{term}_ms`` holds it, ``budget_{term}_ms`` its budget."""

TOTAL_MS: Final = e.TTFT_FROM_DUE_MS
SERVER_SIDE_MS: Final = "server_side_ms"
OVERSHOOT_MS: Final = "overshoot_ms"
NETWORK_UNIDENTIFIED: Final = "network_unidentified"
"""True where the server's TTFT exceeds the client's view: the network is not identifiable."""
IN_FLIGHT: Final = "in_flight"
UNCACHED: Final = "uncached_prompt_tokens"
PROMPT: Final = "prompt_tokens_used"

TermSource = Literal[
    "measured",
    "server",
    "headers",
    "budget",
    "calibrated",
    "schedule",
    "remainder",
    "estimate",
    "mixed",
    "unidentified",
]


def term_col(term: str) -> str:
    """The per-request column of ``term``, in ms."""
    return f"{term}_ms"


def budget_col(term: str) -> str:
    """The per-request budget column of ``term``, in ms (null: no budget)."""
    return f"budget_{term}_ms"


@dataclass(frozen=True, slots=True, kw_only=True)
class DecomposeOptions:
    """What ``decompose`` does. ``network_ms``: a probe's round trip (else estimated from
    the run at ``network_percentile``); ``low_load_quantile``: requests sent with at most
    this quantile of in-flight requests calibrate; an overshoot beyond
    ``max(overshoot_tolerance_ms, overshoot_tolerance x server side)`` is flagged.
    ``time_scale``: the server's wall seconds per second of its own clock (a simulator's
    ``--time-scale``); the client-measured durations are divided by it so that every term
    is on the server's clock, like its timings and the budget's predictions.
    ``load_aware``: predict at the run's load by replaying it through the scheduler (at
    most ``max_replay_steps`` engine steps), instead of at batch 1."""

    percentiles: tuple[float, ...] = (50.0, 90.0, 99.0, 99.9)
    by_workload: bool = True
    selection: RowSelection = field(default_factory=RowSelection)
    slo_ttft_ms: float | None = None
    hide_server_timings: bool = False
    calibrate: bool = False
    network_ms: float | None = None
    network_percentile: float = 5.0
    low_load_quantile: float = 0.25
    overshoot_tolerance_ms: float = 1.0
    overshoot_tolerance: float = 0.05
    window_s: float | None = None
    queue_dominates_share: float = 0.5
    thresholds: ValidityThresholds = field(default_factory=ValidityThresholds)
    time_scale: float = 1.0
    load_aware: bool = True
    max_replay_steps: int = 200_000

    def __post_init__(self) -> None:
        if not self.time_scale > 0:
            raise AnalyzerError(f"time_scale must be > 0, got {self.time_scale}")


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkEstimate:
    """The run's network round trip (ms) and how it was found: ``probe`` (given),
    ``server`` (``first_token - written - server_ttft``), ``first_byte`` (bytes the server
    sent before its first token), ``residual`` (what the predictions leave)."""

    value_ms: float
    source: str


@dataclass(frozen=True, slots=True, kw_only=True)
class CalibrationResult:
    """The prefill fit on low-load requests: ``prefill(n) = a + b n + c n^2`` (``n``
    uncached tokens; None without three distinct lengths) and, with a budget, the achieved
    prefill FLOP/s and its fraction of the peak."""

    samples: int
    max_in_flight: int
    measured: Literal["server", "derived"]
    a_ms: float | None
    b_us_per_token: float | None
    c_ns_per_token2: float | None
    achieved_flops_per_s: float | None
    peak_flops_per_s: float | None
    fraction_of_peak: float | None
    chunk_tokens: int | None = None
    """The step token budget (chunk size) the replay used: the deployment's when it names
    one, else the one fitted from the run (``chunk_fitted``; None: unchunked)."""
    chunk_fitted: bool = False
    decode_efficiency: float | None = None
    """The decode efficiency the replay used: fitted to the low-load requests' gap from
    the first token to the second (one decode step), None when not fitted."""
    tokens_range: tuple[int, int] | None = None
    """The fewest and most uncached tokens among the fitted samples: the quadratic is
    trusted between them only (outside it the replay's roofline at the fitted efficiency)."""

    def prefill_ms(self, n: int) -> float | None:
        """The fitted prefill of ``n`` uncached tokens, ms (None without the quadratic)."""
        if self.a_ms is None or self.b_us_per_token is None or self.c_ns_per_token2 is None:
            return None
        return self.a_ms + self.b_us_per_token * n / 1e3 + self.c_ns_per_token2 * n * n / 1e6


@dataclass(frozen=True, slots=True, kw_only=True)
class SourceOf:
    """Where a term's values came from over the run."""

    term: str
    source: TermSource


@dataclass(frozen=True, slots=True, kw_only=True)
class Unidentified:
    """A term the run does not identify for ``requests`` of its requests, and why: its
    column is null there (never 0, never folded into another term)."""

    term: str
    requests: int
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestTerms:
    """The per-request decomposition (``frame``: one row per ok request with a first token;
    columns ``CLASS``, ``REQUEST_ID``, ``TOTAL_MS``, ``SERVER_SIDE_MS``, each ``{term}_ms``
    and ``budget_{term}_ms``, ``OVERSHOOT_MS``, ``IN_FLIGHT``, token counts, times)."""

    frame: pl.DataFrame
    network: NetworkEstimate
    calibration: CalibrationResult | None
    sources: tuple[SourceOf, ...]
    budget: BudgetModel | None
    first_due_ns: int
    prediction: str = ""
    """How the server terms were predicted ("" when the server's timings were used)."""
    unidentified: tuple[Unidentified, ...] = ()
    """Terms left null for some requests, with the reason."""


_SERVER_COLS: Final = {
    "queue": s.SERVER_QUEUE_MS,
    "prefill": s.SERVER_PREFILL_MS,
    "transfer": s.SERVER_TRANSFER_MS,
    "first_token": s.SERVER_FIRST_TOKEN_MS,
    "ttft": s.SERVER_TTFT_MS,
}


def in_flight_at_send() -> pl.Expr:
    """Requests in flight when each request was sent, itself included: sent at or before
    it, minus ended at or before it (a request that never ended stays in flight)."""
    sent = pl.col(s.SENT_NS)
    started = sent.drop_nulls().sort().search_sorted(sent, side="right").cast(pl.Int64)
    ended = pl.col(s.END_NS).drop_nulls().sort().search_sorted(sent, side="right").cast(pl.Int64)
    return pl.when(sent.is_not_null()).then(started - ended).alias(IN_FLIGHT)


def _base(lf: pl.LazyFrame, options: DecomposeOptions) -> pl.LazyFrame:
    """Ok requests with a first token, the client terms, the server's timings (``_s_*``)."""
    hide = options.hide_server_timings
    scale = options.time_scale
    written, sent = pl.col(s.REQUEST_WRITTEN_NS), pl.col(s.SENT_NS)
    after_connect = pl.coalesce(pl.col(s.CONNECTED_NS), sent)
    prompt = pl.col(s.PROMPT_TOKENS).cast(pl.Int64).fill_null(e.requested_prompt_tokens())
    server = [
        (pl.lit(None, dtype=pl.Float64) if hide else pl.col(c).cast(pl.Float64)).alias(f"_s_{t}")
        for t, c in _SERVER_COLS.items()
    ]
    return (
        lf.with_columns(in_flight_at_send())
        .filter(e.is_ok() & pl.col(s.FIRST_TOKEN_NS).is_not_null() & written.is_not_null())
        .select(
            (pl.col(s.WORKLOAD) if options.by_workload else pl.lit(e.ALL))
            .cast(pl.String)
            .alias(e.CLASS),
            pl.col(s.REQUEST_ID),
            pl.col(ROW),
            pl.col(s.DUE_NS),
            pl.col(s.SENT_NS),
            pl.col(IN_FLIGHT),
            prompt.alias(PROMPT),
            pl.col(s.CACHED_TOKENS).fill_null(0).cast(pl.Int64),
            e.uncached_prompt_tokens().alias(UNCACHED),
            (e.ttft_from_due_ms() / scale).alias(TOTAL_MS),
            (e.ms_between(s.FIRST_TOKEN_NS, s.REQUEST_WRITTEN_NS) / scale).alias(SERVER_SIDE_MS),
            (e.ms_between(s.SENT_NS, s.DUE_NS) / scale).alias(term_col("client_delay")),
            pl.when(pl.col(s.CONNECTED_NS).is_not_null())
            .then(e.ms_between(s.CONNECTED_NS, s.SENT_NS) / scale)
            .otherwise(0.0)
            .alias(term_col("connect")),
            ((written - after_connect).cast(pl.Float64) / 1e6 / scale).alias(term_col("write")),
            # Bytes before the first token: the server answered before its own work began.
            pl.when(pl.col(s.FIRST_BYTE_NS) < pl.col(s.FIRST_TOKEN_NS))
            .then(e.ms_between(s.FIRST_BYTE_NS, s.REQUEST_WRITTEN_NS) / scale)
            .alias("_early_byte_ms"),
            # The response head before the first token: the server answered on receipt, so
            # last byte written -> head read is this request's round trip (and the server's
            # handling before its head).
            pl.when(pl.col(s.HEADERS_NS) < pl.col(s.FIRST_TOKEN_NS))
            .then(e.ms_between(s.HEADERS_NS, s.REQUEST_WRITTEN_NS) / scale)
            .alias("_head_ms"),
            # A fresh connection's TCP handshake: one round trip of this request's path.
            pl.when(pl.col(s.CONNECT_START_NS).is_not_null() & pl.col(s.CONNECTED_NS).is_not_null())
            .then(e.ms_between(s.CONNECTED_NS, s.CONNECT_START_NS) / scale)
            .alias("_connect_rtt_ms"),
            *server,
        )
    )


def _predictions(keys: pl.DataFrame, budget: BudgetModel | None) -> pl.DataFrame:
    """Budget predictions per distinct (uncached, cached, prompt): prefill, KV transfer
    (0 without a link) and first token (0 when the prefill step samples it)."""
    rows: list[tuple[int, int, int, float | None, float | None, float]] = []
    for n, cached, prompt in keys.iter_rows():
        if budget is None:
            rows.append((n, cached, prompt, None, None, 0.0))
            continue
        m, d, link = budget.model, budget.deployment, budget.link
        first = 0.0
        if link is not None or not budget.first_token_in_prefill:
            first = decode_step_time_s(m, d, [max(1, int(prompt))]) * 1e3
        transfer = 0.0 if link is None else kv_transfer_time_s(m, int(prompt), link) * 1e3
        rows.append(
            (n, cached, prompt, prefill_time_s(m, d, int(n), int(cached)) * 1e3, first, transfer)
        )
    return pl.DataFrame(
        rows,
        schema={
            UNCACHED: pl.Int64,
            s.CACHED_TOKENS: pl.Int64,
            PROMPT: pl.Int64,
            "_p_prefill": pl.Float64,
            "_p_first": pl.Float64,
            "_p_transfer": pl.Float64,
        },
        orient="row",
    )


def _quantile(frame: pl.DataFrame, column: str, percentile: float) -> float | None:
    values = frame.get_column(column).drop_nulls()
    if values.len() == 0:
        return None
    q = values.quantile(percentile / 100, interpolation="linear")
    return float(q) if q is not None else None


def _network(frame: pl.DataFrame, options: DecomposeOptions) -> NetworkEstimate:
    if options.network_ms is not None:
        return NetworkEstimate(value_ms=options.network_ms, source="probe")
    p = options.network_percentile
    from_server = frame.select(
        (pl.col(SERVER_SIDE_MS) - pl.col("_s_ttft")).clip(lower_bound=0).alias("_n")
    )
    value = _quantile(from_server, "_n", p)
    if value is not None:
        return NetworkEstimate(value_ms=value, source="server")
    value = _quantile(frame, "_early_byte_ms", p)
    if value is not None:
        return NetworkEstimate(value_ms=max(0.0, value), source="first_byte")
    residual = frame.select(
        (
            pl.col(SERVER_SIDE_MS)
            - pl.col("_p_prefill")
            - pl.col("_p_first")
            - pl.col("_p_transfer")
        ).alias("_n")
    )
    value = _quantile(residual, "_n", p)
    if value is not None:
        return NetworkEstimate(value_ms=max(0.0, value), source="residual")
    return NetworkEstimate(value_ms=0.0, source="residual")


NETWORK_MS: Final = "_net"
"""Each request's own network round trip (null: unidentified), ms, server clock."""
_NETWORK_SOURCE: Final = "_net_src"
NEGATIVE_SLACK_MS: Final = 1e-3
"""A server-reported term this far below 0 is rounding, read as 0; further is unidentified."""


def _non_negative(value: pl.Expr) -> pl.Expr:
    """``value`` where >= 0 (rounding below it read as 0); null where clearly negative."""
    return pl.when(value >= 0).then(value).when(value > -NEGATIVE_SLACK_MS).then(0.0)


def _request_network(frame: pl.DataFrame, run_level: NetworkEstimate) -> pl.DataFrame:
    """Each request's network round trip (``NETWORK_MS``) and where it came from.

    In order: a probe's value (given for the run); ``server``: the client's server-side
    time minus the server's reported TTFT (null where that is negative: the two clocks
    disagree and the split of that request is unidentified); ``headers``: the response head
    (else the first byte) read before the first token, ``head - request_written``, unless
    the run's heads track its server-side times (``_heads_on_receipt``); the TCP
    handshake of the request's fresh connection; the run's estimate (``estimate``)."""
    if run_level.source == "probe":
        return frame.with_columns(
            pl.lit(run_level.value_ms).alias(NETWORK_MS), pl.lit("estimate").alias(_NETWORK_SOURCE)
        )
    side = pl.col(SERVER_SIDE_MS)
    server = side - pl.col("_s_ttft")
    # A head cannot take longer than the first token: bound by the server-side time.
    head = pl.coalesce(pl.col("_head_ms"), pl.col("_early_byte_ms"))
    head = pl.when(head.is_not_null()).then(pl.min_horizontal(head.clip(lower_bound=0.0), side))
    if not _heads_on_receipt(frame, head):
        head = pl.lit(None, dtype=pl.Float64)
    rtt = pl.col("_connect_rtt_ms")
    rtt = pl.when(rtt.is_not_null()).then(pl.min_horizontal(rtt.clip(lower_bound=0.0), side))
    has_server = pl.col("_s_ttft").is_not_null()
    return frame.with_columns(
        pl.when(has_server)
        .then(_non_negative(server))
        .otherwise(pl.coalesce(head, rtt, pl.lit(run_level.value_ms)))
        .alias(NETWORK_MS),
        pl.when(has_server)
        .then(pl.when(_non_negative(server).is_null()).then(pl.lit("unidentified")))
        .otherwise(
            pl.when(head.is_not_null())
            .then(pl.lit("headers"))
            .when(rtt.is_not_null())
            .then(pl.lit("measured"))
            .otherwise(pl.lit("estimate"))
        )
        .fill_null(pl.lit("server"))
        .alias(_NETWORK_SOURCE),
    )


HEAD_TRACKS_WORK: Final = 0.5
"""Heads whose delays correlate with the server-side time at least this much (Pearson)
were held back by the server's work (llama.cpp writes its head when a slot takes the
request): they do not measure the network."""


def _heads_on_receipt(frame: pl.DataFrame, head: pl.Expr) -> bool:
    """Whether the run's early response heads measure the network: at least 3 of them,
    their delays not tracking the server-side time (a server that answers on receipt, as
    the simulator and vLLM do, shows a delay independent of its queue)."""
    heads = frame.select(head.alias("_h"), pl.col(SERVER_SIDE_MS)).drop_nulls()
    if heads.height < 3:
        return False
    corr = heads.select(pl.corr("_h", SERVER_SIDE_MS)).item()
    return not (isinstance(corr, float) and corr >= HEAD_TRACKS_WORK)


def _network_source(frame: pl.DataFrame) -> TermSource:
    found = set(frame.get_column(_NETWORK_SOURCE).unique().to_list()) - {"unidentified"}
    if len(found) == 1:
        only = found.pop()
        for source in ("server", "headers", "measured", "estimate"):
            if only == source:
                return source
    return "mixed" if found else "unidentified"


def _unidentified(frame: pl.DataFrame) -> tuple[Unidentified, ...]:
    """The terms left null for some requests, with the reason."""
    out: list[Unidentified] = []
    negative_network = frame.filter(pl.col(_NETWORK_SOURCE) == "unidentified").height
    if negative_network:
        out.append(
            Unidentified(
                term="network",
                requests=negative_network,
                reason="the server's reported TTFT exceeds the client's server-side time "
                "(first token - request written): the clocks disagree",
            )
        )
    for term in ("queue", "prefill", "transfer", "first_token"):
        col = frame.get_column(term_col(term))
        nulls = col.null_count()
        if not nulls:
            continue
        negative = frame.filter(pl.col(f"_s_{term}") < -NEGATIVE_SLACK_MS).height
        if negative:
            reason = f"the server reported a negative {term.replace('_', ' ')}"
        elif term == "queue":
            reason = "the queue is the remainder of the server-side time, and the network "
            reason += "of the same requests is unidentified"
        else:
            reason = "no server timing and no prediction for it"
        out.append(Unidentified(term=term, requests=nulls, reason=reason))
    return tuple(out)


def _calibrate(
    frame: pl.DataFrame, budget: BudgetModel, network_ms: float, options: DecomposeOptions
) -> CalibrationResult:
    """Fit prefill on low-load requests: the server's prefill, else what the others leave."""
    cutoff = frame.get_column(IN_FLIGHT).quantile(options.low_load_quantile, "lower")
    max_in_flight = int(cutoff) if isinstance(cutoff, int | float) else 1
    measured = pl.coalesce(
        pl.col("_s_prefill"),
        pl.col(SERVER_SIDE_MS)
        - pl.col(NETWORK_MS).fill_null(network_ms)
        - pl.col("_s_first_token").fill_null(pl.col("_p_first"))
        - pl.col("_s_transfer").fill_null(pl.col("_p_transfer")),
    )
    source: Literal["server", "derived"] = (
        "server" if frame.get_column("_s_prefill").null_count() < frame.height else "derived"
    )
    rows = frame.select(pl.col(UNCACHED), pl.col(s.CACHED_TOKENS), pl.col(IN_FLIGHT), measured)
    rows = rows.rename({rows.columns[-1]: "_m"}).filter(pl.col("_m") > 0)
    low = rows.filter(pl.col(IN_FLIGHT) <= max_in_flight)
    if low.get_column(UNCACHED).n_unique() < 3:
        low = rows
    if low.height == 0:
        raise AnalyzerError("calibration: no request with a positive measured prefill")
    samples = [
        PrefillSample(prompt_tokens=int(n), prefill_s=float(ms) / 1e3, cached_tokens=int(c))
        for n, c, _, ms in low.iter_rows()
    ]
    try:
        cal: Calibration = calibrate_prefill(budget.model, budget.deployment, samples)
    except BudgetError as exc:
        raise AnalyzerError(f"calibration failed: {exc}") from exc
    a = b = c = None
    if cal.a_s is not None and cal.b_s_per_token is not None and cal.c_s_per_token2 is not None:
        a, b, c = cal.a_s * 1e3, cal.b_s_per_token * 1e6, cal.c_s_per_token2 * 1e9
    return CalibrationResult(
        samples=cal.samples,
        max_in_flight=int(low.get_column(IN_FLIGHT).max() or 0),  # type: ignore[arg-type]
        measured=source,
        a_ms=a,
        b_us_per_token=b,
        c_ns_per_token2=c,
        achieved_flops_per_s=cal.achieved_flops_per_s,
        peak_flops_per_s=cal.peak_flops_per_s,
        fraction_of_peak=cal.fraction_of_peak,
        tokens_range=(
            int(low.get_column(UNCACHED).min()),  # type: ignore[arg-type]
            int(low.get_column(UNCACHED).max()),  # type: ignore[arg-type]
        ),
    )


CHUNK_CANDIDATES: Final = (None, 256, 512, 1024, 2048, 4096, 8192, 16384)
"""Step token budgets ``--calibrate`` tries when the deployment names none (None:
unchunked): vLLM's, SGLang's and llama.cpp's usual values."""
CHUNK_FIT_GAIN: Final = 0.10
"""A fitted chunk size replaces "unchunked" only if it lowers the replay's error by this."""


def _observed_gaps(scanned: pl.LazyFrame, options: DecomposeOptions) -> pl.DataFrame:
    """Each request's gap from its first token to its second (one token per chunk), ms on
    the server's clock (``ROW``, ``_g``)."""
    offsets, tokens = pl.col(s.CHUNK_OFFSETS_US), pl.col(s.CHUNK_TOKENS)
    single = tokens.list.first().fill_null(1) == 1
    gap = (offsets.list.get(1, null_on_oob=True) - offsets.list.first()).cast(pl.Float64)
    return scanned.select(
        pl.col(ROW),
        pl.when(single & (offsets.list.len() > 1)).then(gap / 1e3 / options.time_scale).alias("_g"),
    ).collect()


def _fit_decode(
    scanned: pl.LazyFrame,
    frame: pl.DataFrame,
    budget: BudgetModel,
    deploy: Deployment,
    network_ms: float,
    options: DecomposeOptions,
) -> Deployment:
    """``deploy`` with the decode efficiency that makes the replay's gap to the second
    token (one decode step, for a request alone) match the low-load requests' median
    (capped at 1); unchanged without such gaps or when the replay cannot run."""
    cutoff = frame.get_column(IN_FLIGHT).quantile(options.low_load_quantile, "lower")
    low = frame.filter(pl.col(IN_FLIGHT) <= (cutoff if isinstance(cutoff, int | float) else 1))
    gaps = _observed_gaps(scanned, options).join(low.select(ROW), on=ROW).drop_nulls()
    if gaps.height == 0:
        return deploy
    try:
        replay = load_aware_phases(
            scanned,
            budget,
            network_ms=network_ms,
            time_scale=options.time_scale,
            deployment=deploy,
            max_steps=options.max_replay_steps,
            second_token=True,
        )
    except BudgetError:
        return deploy
    joined = replay.frame.join(gaps, on=ROW).drop_nulls([SECOND_COL, "_g"])
    predicted = joined.get_column(SECOND_COL).median()
    observed = joined.get_column("_g").median()
    if not isinstance(predicted, float) or not isinstance(observed, float) or observed <= 0:
        return deploy
    efficiency = min(1.0, deploy.decode_efficiency * predicted / observed)
    return replace(deploy, decode_efficiency=efficiency) if efficiency > 0 else deploy


def _fit_chunk(
    scanned: pl.LazyFrame,
    frame: pl.DataFrame,
    budget: BudgetModel,
    deploy: Deployment,
    network_ms: float,
    options: DecomposeOptions,
) -> Deployment:
    """``deploy`` with the chunk size under which the replay of the whole run best explains
    each request's measured server-side time (least mean absolute error of the predicted
    queue + prefill + transfer + first token against ``server side - network``, plus that
    of the gap to the second token, the length of the step after the first, which the
    chunk size sets under load).

    A prompt alone costs about the same chunked or not, so the low-load fit cannot see the
    chunk size; under load it decides who waits and who shares a step, which the run's
    own queueing shows. Candidates the replay cannot run are skipped; unchunked stays unless
    a chunk size is clearly (``CHUNK_FIT_GAIN``) better."""
    observed = frame.select(
        pl.col(ROW), (pl.col(SERVER_SIDE_MS) - pl.col(NETWORK_MS).fill_null(network_ms)).alias("_o")
    )
    # The second token a step after the first: that step's length, seen by the client.
    observed = observed.join(_observed_gaps(scanned, options), on=ROW, how="left")
    best: tuple[float, Deployment] | None = None
    told: float | None = None
    for chunk in CHUNK_CANDIDATES:
        candidate = replace(deploy, chunk_tokens=chunk)
        try:
            replay = load_aware_phases(
                scanned,
                budget,
                network_ms=network_ms,
                time_scale=options.time_scale,
                deployment=candidate,
                max_steps=options.max_replay_steps,
                second_token=True,
            )
        except BudgetError:
            continue
        joined = replay.frame.join(observed, on=ROW)
        if joined.height == 0:
            continue
        predicted = pl.sum_horizontal("_l_queue", "_l_prefill", "_l_transfer", "_l_first")
        error = joined.select(
            (predicted - pl.col("_o")).abs().mean()
            + (pl.col(SECOND_COL) - pl.col("_g")).abs().mean().fill_null(0.0)
        ).item()
        if not isinstance(error, float):
            continue
        if chunk is None:
            told = error
        if best is None or error < best[0]:
            best = (error, candidate)
    if best is None or (told is not None and best[0] > (1 - CHUNK_FIT_GAIN) * told):
        return deploy  # no candidate explains the run clearly better than unchunked
    return best[1]


def _calibrated_prefill(
    keys: pl.DataFrame, cal: CalibrationResult, budget: BudgetModel, efficiency: float
) -> pl.DataFrame:
    """Calibrated prefill per key: the quadratic when fitted, else the budget at the fitted
    efficiency."""
    deploy = calibrated(budget.deployment, _as_calibration(cal, efficiency))
    values = []
    for n, cached, prompt in keys.iter_rows():
        fitted = cal.prefill_ms(int(n))
        if fitted is None:
            fitted = prefill_time_s(budget.model, deploy, int(n), int(cached)) * 1e3
        values.append((n, cached, prompt, max(0.0, fitted)))
    return pl.DataFrame(
        values,
        schema={UNCACHED: pl.Int64, s.CACHED_TOKENS: pl.Int64, PROMPT: pl.Int64, "_c": pl.Float64},
        orient="row",
    )


def _as_calibration(cal: CalibrationResult, efficiency: float) -> Calibration:
    return Calibration(
        samples=cal.samples,
        efficiency=efficiency,
        achieved_flops_per_s=cal.achieved_flops_per_s or 0.0,
        peak_flops_per_s=cal.peak_flops_per_s or 1.0,
        a_s=None,
        b_s_per_token=None,
        c_s_per_token2=None,
    )


def _source(server_rows: int, rows: int, fallback: TermSource) -> TermSource:
    if rows and server_rows == rows:
        return "server"
    return fallback if server_rows == 0 else "mixed"


def request_terms(
    run: Path | str, budget: BudgetModel | None, options: DecomposeOptions
) -> RequestTerms:
    """The per-request decomposition of a run (see the module docstring)."""
    scanned = scan_run(run).with_row_index(ROW)
    lf = select_rows(scanned, options.selection)
    first_due = lf.select(pl.col(s.DUE_NS).min()).collect().item()
    frame = _base(lf, options).collect()
    if frame.height == 0:
        raise AnalyzerError(f"{run}: no ok request with a first token to decompose")
    keys = frame.select(UNCACHED, s.CACHED_TOKENS, PROMPT).unique()
    needs_prediction = any(
        frame.get_column(f"_s_{t}").null_count() > 0 for t in ("prefill", "first_token")
    )
    if budget is None and (needs_prediction or options.calibrate):
        raise AnalyzerError(
            "decompose needs a budget (--budget FILE, or --model and --gpu) when server "
            "timings are missing or hidden, or to calibrate"
        )
    frame = frame.join(_predictions(keys, budget), on=[UNCACHED, s.CACHED_TOKENS, PROMPT])
    network = _network(frame, options)
    frame = _request_network(frame, network)
    calibration = None
    budget_prefill = pl.col("_p_prefill")
    prefill_fallback: TermSource = "budget"
    if options.calibrate and budget is not None:
        calibration = _calibrate(frame, budget, network.value_ms, options)
        eff = (calibration.fraction_of_peak or budget.deployment.prefill_efficiency) or 1.0
        frame = frame.join(
            _calibrated_prefill(keys, calibration, budget, eff),
            on=[UNCACHED, s.CACHED_TOKENS, PROMPT],
        )
        budget_prefill = pl.col("_c")
        prefill_fallback = "calibrated"
    prediction, phases = "", empty_phases()
    if budget is not None and needs_prediction:
        deploy = None
        if calibration is not None:
            eff = (calibration.fraction_of_peak or budget.deployment.prefill_efficiency) or 1.0
            deploy = calibrated(budget.deployment, _as_calibration(calibration, eff))
            if options.load_aware:
                deploy = _fit_decode(scanned, frame, budget, deploy, network.value_ms, options)
                calibration = replace(calibration, decode_efficiency=deploy.decode_efficiency)
            if deploy.chunk_tokens is None and options.load_aware:
                deploy = _fit_chunk(scanned, frame, budget, deploy, network.value_ms, options)
                calibration = replace(
                    calibration, chunk_tokens=deploy.chunk_tokens, chunk_fitted=True
                )
            else:
                calibration = replace(calibration, chunk_tokens=deploy.chunk_tokens)
        prediction, phases = predict_phases(
            scanned,
            budget,
            network_ms=network.value_ms,
            time_scale=options.time_scale,
            load_aware=options.load_aware,
            deployment=deploy,
            calibrated=calibration is not None,
            max_steps=options.max_replay_steps,
        )
        if phases.height:
            prefill_fallback = "schedule"
            if calibration is not None and calibration.chunk_fitted and calibration.chunk_tokens:
                prediction += f" ({calibration.chunk_tokens}-token steps fitted from the run)"
    frame = frame.join(phases, on=ROW, how="left")
    if calibration is not None:
        # The calibrated line is what a prompt costs alone on this server; the replay says
        # how much the load stretches it.
        # Beyond the fitted lengths the quadratic extrapolates; the replay's own prefill,
        # at the fitted efficiency, is used there.
        lo, hi = calibration.tokens_range or (0, 0)
        in_range = pl.col(UNCACHED).is_between(lo, hi)
        frame = frame.with_columns(
            pl.when(in_range)
            .then(budget_prefill * pl.col("_l_prefill") / pl.col("_l_alone"))
            .otherwise(pl.col("_l_prefill"))
            .alias("_l_prefill")
        )
    split = _server_split(frame, network.value_ms, budget_prefill, options)
    unidentified = _unidentified(split)
    network_source = _network_source(split)
    terms = split.drop([c for c in split.columns if c.startswith("_")])
    counts = {t: frame.get_column(f"_s_{t}").drop_nulls().len() for t in _SERVER_COLS}
    other_fallback: TermSource = "schedule" if prefill_fallback == "schedule" else "budget"
    n = frame.height
    sources = (
        *(SourceOf(term=t, source="measured") for t in CLIENT_TERMS),
        SourceOf(term="network", source=network_source),
        SourceOf(term="queue", source=_source(counts["queue"], n, "remainder")),
        SourceOf(term="prefill", source=_source(counts["prefill"], n, prefill_fallback)),
        SourceOf(term="transfer", source=_source(counts["transfer"], n, other_fallback)),
        SourceOf(term="first_token", source=_source(counts["first_token"], n, other_fallback)),
    )
    return RequestTerms(
        frame=terms,
        network=network,
        calibration=calibration,
        sources=sources,
        budget=budget,
        first_due_ns=int(first_due or 0),
        prediction=prediction,
        unidentified=unidentified,
    )


def _server_split(
    frame: pl.DataFrame, network_ms: float, budget_prefill: pl.Expr, options: DecomposeOptions
) -> pl.DataFrame:
    side = pl.col(SERVER_SIDE_MS)
    # A negative network (the server's TTFT longer than the client's view) is a clock
    # artefact, not a duration: the network term is null (unidentified, ``NETWORK_MS``),
    # the request is marked, and the split of the rest takes it as 0 with the excess kept
    # as overshoot, so the identified parts still add up.
    raw_network = side - pl.col("_s_ttft")
    skewed = (raw_network < 0).fill_null(False)
    network = pl.col(NETWORK_MS)
    network_in_split = pl.when(skewed).then(0.0).otherwise(network)

    def split(term: str, *predictions: pl.Expr) -> pl.Expr:
        # The server's value where it reported one (null where negative: unidentified),
        # the prediction only where it reported none.
        server = pl.col(f"_s_{term}")
        predicted = pl.coalesce(*predictions).clip(lower_bound=0.0)
        return pl.when(server.is_null()).then(predicted).otherwise(_non_negative(server))

    prefill = split("prefill", pl.col("_l_prefill"), budget_prefill)
    transfer = split("transfer", pl.col("_l_transfer"), pl.col("_p_transfer"))
    first = split("first_token", pl.col("_l_first"), pl.col("_p_first"))
    remainder = side - network_in_split - pl.col(term_col("prefill"))
    remainder = remainder - pl.col(term_col("transfer")) - pl.col(term_col("first_token"))
    queue_is_remainder = pl.col("_s_queue").is_null()
    tolerance = pl.max_horizontal(
        pl.lit(options.overshoot_tolerance_ms), side * options.overshoot_tolerance
    )
    out = frame.with_columns(
        network.alias(term_col("network")),
        prefill.alias(term_col("prefill")),
        transfer.alias(term_col("transfer")),
        first.alias(term_col("first_token")),
    ).with_columns(
        pl.when(queue_is_remainder)
        .then(remainder.clip(lower_bound=0.0))
        .otherwise(_non_negative(pl.col("_s_queue")))
        .alias(term_col("queue")),
        pl.when(queue_is_remainder)
        .then(remainder.clip(upper_bound=0.0))
        .when(skewed)
        .then(raw_network)
        .otherwise(0.0)
        .alias(OVERSHOOT_MS),
        skewed.alias(NETWORK_UNIDENTIFIED),
        (queue_is_remainder & (remainder < -tolerance)).alias("overshoot_flag"),
        *(pl.lit(0.0).alias(budget_col(t)) for t in CLIENT_TERMS),
        pl.lit(network_ms).alias(budget_col("network")),
        budget_prefill.alias(budget_col("prefill")),
        pl.col("_p_transfer").alias(budget_col("transfer")),
        pl.col("_p_first").alias(budget_col("first_token")),
        pl.col("_l_queue").alias(budget_col("queue")),
    )
    return out
