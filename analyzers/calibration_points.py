"""Calibration points of a run directory: measured prefill and decode steps of its requests.

``loadgen plan calibrate RUN`` fits a step-time profile to a run of the tool's own (a
calibration sweep against a real endpoint, a simulated run, any run). This module turns
the run's rows into the budget package's ``Observation``s, which ``fit_profiles`` takes as
it takes a CSV's:

- **Prefill** (batch 1): requests that found the server idle, no other request in flight
  between their send and their first token; or **beside decodes** (a mixed step): every
  other request in flight then was already decoding at the send and still decoding at the
  first token (within half a gap), so the step carried the prompt and one token of each
  (``Observation.decoding``). The time is the server-reported prefill
  (``server_prefill_ms``: vLLM's per-request metrics, llama.cpp's ``prompt_ms``, the
  simulator's own) where the row has it, else the TTFT measured by the client (which adds
  the network's round trip: use a loopback or nearby client). New tokens are the prompt
  less its cached prefix. A prompt longer than the engine's chunk
  (``scheduler.max_batched_tokens`` of the recorded deployment) took several steps, so it
  is left out.
- **Decode** (per output token): requests whose decode span (first token to last) no other
  request entered or left: every other request in flight over it was already decoding
  before and still decoding after (within half a gap between tokens: one step's tokens
  reach the client one stream after another), so the batch is known (1 + those) and
  constant, with at least ``MIN_DECODE_GAPS`` gaps (the steps right after a prefill are
  no steady decode). The time per token is ``server_decode_ms`` (else the client's
  first-to-last span) over ``completion_tokens - 1``; the context per sequence is its
  prompt plus half its output (as the Splitwise table's), averaged over the batch.
- **Front end** (not a point: printed): for requests alone with the server's queue and
  prefill, the client's TTFT from the last byte written less those, the median: what the
  server spends outside its engine (parsing, tokenizing, streaming the first token), for
  ``loadgen sim --frontend-ms`` where that front end shares the engine's cores.
- **The front end's share of its engine** (not a point: printed; the rule in
  :mod:`analyzers.frontend_share`), from prefills that requests arrived during. **Several
  runs** of one server are pooled by :mod:`analyzers.calibration_pool`.
- **Decode, a steady stretch** (when the batch changed over the span): the longest stretch
  of the span between two events of other requests (a send, a first token, an end) in
  which no other request waited for its first token (so no step carried a prefill); the
  batch is 1 + the requests decoding over it. The time per token is from the request's
  own chunk stamps, over the gaps wholly inside the stretch (at least
  ``MIN_DECODE_GAPS``). Two requests sent together give batch-2 points this way: a
  server prefills the second a step after the first, so they start and end a step apart.

Times are in the model's seconds: client-measured spans are divided by the recorded
``time_scale`` (a simulator's wall seconds per model second); server timings are already
in the server's own time. Points with the same key are merged by their median.

The model, GPU and tensor parallelism come from ``run.json``'s recorded deployment
(``RunInfo.deployment``: a simulated run records all of them; a replay what its preflight
learnt), or from the caller (``--model/--gpu/--gpus``), which override it.
Imports polars, ``traces`` and the budget package (never ``loadgen``).
"""

from __future__ import annotations

import bisect
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import polars as pl

from analyzers.budget.measurements import Observation, median_observations
from analyzers.errors import BudgetError
from analyzers.frames import run_info, scan_run
from analyzers.frontend_share import FrontEndShare, OverlappedPrefill, front_end_share, ms_text
from traces import schema as s

MIN_DECODE_GAPS = 4
"""The fewest gaps between tokens that make a decode span or a steady stretch a point. A
span of a few gaps is mostly the steps right after a prefill, which carry the new
stream's start (on vLLM's CPU build its front end, on the engine's core, sends the first
token then): 2-token probes beside a decoding request measured 8.0-9.3 ms a step where
the steady batch-2 stretches of the same run took 6.0-6.2 ms."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunDeployment:
    """What the points are measured on: catalog names, tensor parallelism of the prefill
    and decode instances, the engine, the chunk size and the time scale, and where each
    came from (``said``: one line)."""

    model: str
    gpu: str
    engine: str = ""
    prefill_tp: int = 1
    decode_tp: int = 1
    chunk_tokens: int | None = None
    time_scale: float = 1.0
    said: str = ""


@dataclass(frozen=True, slots=True, kw_only=True)
class RunPoints:
    """The observations of a run and how many requests gave (or could not give) each."""

    deployment: RunDeployment
    observations: tuple[Observation, ...]
    requests: int
    prefill_server: int
    prefill_ttft: int
    decode: int
    not_idle: int
    chunked: int
    decode_unknown_batch: int
    decode_stretches: int = 0
    decode_short: int = 0
    """Requests of 2 to ``MIN_DECODE_GAPS`` output tokens: too few gaps for a point."""
    prefill_beside_decodes: int = 0
    front_ends: tuple[float, ...] = ()
    """The server's time outside its engine for each request alone, ms (see the module)."""
    overlapped: tuple[OverlappedPrefill, ...] = ()
    """Prefills that requests arrived during (the front end's share)."""

    @property
    def front_end_ms(self) -> float | None:
        """The median of ``front_ends`` (None without a request alone)."""
        return statistics.median(self.front_ends) if self.front_ends else None

    @property
    def front_end_requests(self) -> int:
        return len(self.front_ends)

    def front_end_share(self) -> FrontEndShare | None:
        return front_end_share(self.overlapped, self.observations, self.front_end_ms)

    def summary(self) -> str:
        """One paragraph: what was taken from the run and what was left out, and why."""
        d = self.deployment
        return (
            f"{d.said}\n"
            f"{self.requests} ok requests: {self.prefill_server} prefills timed by the server, "
            f"{self.prefill_ttft} by TTFT (no other request waiting), "
            f"{self.prefill_beside_decodes} of them beside decoding requests, "
            f"{self.decode} decode spans at a known "
            f"batch, {self.decode_stretches} steady stretches of spans whose batch changed; "
            f"left out {self.not_idle} prefills that shared the server otherwise, "
            f"{self.chunked} longer than a chunk ({d.chunk_tokens or 'no limit'} tokens), "
            f"{self.decode_unknown_batch} decode spans with no steady stretch, "
            f"{self.decode_short} decode spans of under {MIN_DECODE_GAPS} gaps"
            + (
                ""
                if self.front_end_ms is None
                else f"\nfront end: {ms_text(self.front_end_ms)} ms a request (median of "
                f"{self.front_end_requests} alone: TTFT from the last byte written less the "
                "server's queue and prefill; loadgen sim --frontend-ms, on a server whose "
                "front end shares the engine's cores)"
            )
            + ("" if (share := self.front_end_share()) is None else f"\n{share.said()}")
        )


def run_deployment(
    run: Path,
    *,
    model: str | None = None,
    gpu: str | None = None,
    tensor_parallel: int | None = None,
) -> RunDeployment:
    """The run's recorded deployment with the caller's names over it; ``BudgetError`` when
    neither names the model or the GPU."""
    info = run_info(run)
    spec = info.deployment.spec() if info is not None and info.deployment is not None else None
    found = "run.json deployment" if spec is not None else "no deployment in run.json"
    model_name = model or (spec.model if spec else None)
    gpu_name = gpu or (spec.gpu if spec else None)
    missing = [
        flag for flag, value in (("--model", model_name), ("--gpu", gpu_name)) if value is None
    ]
    if missing:
        raise BudgetError(
            f"{run}: {found} names no {' and no '.join(m[2:] for m in missing)}; "
            f"give {' and '.join(missing)}"
        )
    assert model_name is not None
    assert gpu_name is not None
    tp = (spec.tensor_parallel or spec.gpus) if spec else None
    prefill_tp = decode_tp = tensor_parallel or tp or 1
    if spec is not None and spec.disaggregated and tensor_parallel is None:
        prefill_tp = spec.prefill.gpus or prefill_tp
        decode_tp = spec.decode.gpus or decode_tp
    time_scale = (spec.time_scale if spec else None) or 1.0
    chunk = spec.scheduler.max_batched_tokens if spec else None
    tp_said = f"tp {prefill_tp}" if prefill_tp == decode_tp else f"tp {prefill_tp}/{decode_tp}"
    given = ", ".join(
        flag
        for flag, value in (("--model", model), ("--gpu", gpu), ("--gpus", tensor_parallel))
        if value is not None
    )
    return RunDeployment(
        model=model_name,
        gpu=gpu_name,
        engine=(spec.engine or "") if spec else "",
        prefill_tp=prefill_tp,
        decode_tp=decode_tp,
        chunk_tokens=chunk,
        time_scale=time_scale,
        said=f"{model_name} on {gpu_name}, {tp_said}, time scale {time_scale:g} (from {found}"
        + (f"; {given} given" if given else "")
        + ")",
    )


@dataclass(frozen=True, slots=True, kw_only=True)
class _Row:
    sent: int
    first: int
    end: int
    prompt: int
    cached: int
    completion: int
    prefill_ms: float | None
    decode_ms: float | None
    written: int | None
    queue_ms: float | None
    offsets: list[int]
    """Chunk arrivals, microseconds after ``sent``."""
    tokens: list[int] | None
    """Tokens per chunk (null: one each)."""


def _rows(run: Path) -> list[_Row]:
    prompt = pl.coalesce(pl.col(s.PROMPT_TOKENS), pl.col(s.INPUT_TOKENS))
    frame = (
        scan_run(run)
        .filter(
            (pl.col(s.OUTCOME) == s.OUTCOME_OK)
            & pl.col(s.WARMUP).fill_null(False).not_()
            & pl.col(s.FIRST_TOKEN_NS).is_not_null()
            & pl.col(s.END_NS).is_not_null()
        )
        .select(
            pl.col(s.SENT_NS).alias("sent"),
            pl.col(s.FIRST_TOKEN_NS).alias("first"),
            pl.col(s.END_NS).alias("end"),
            prompt.fill_null(0).alias("prompt"),
            pl.col(s.CACHED_TOKENS).fill_null(0).alias("cached"),
            pl.col(s.COMPLETION_TOKENS).fill_null(0).alias("completion"),
            pl.col(s.SERVER_PREFILL_MS).alias("prefill_ms"),
            pl.col(s.SERVER_DECODE_MS).alias("decode_ms"),
            pl.col(s.REQUEST_WRITTEN_NS).alias("written"),
            pl.col(s.SERVER_QUEUE_MS).alias("queue_ms"),
            pl.col(s.CHUNK_OFFSETS_US).alias("offsets"),
            pl.col(s.CHUNK_TOKENS).alias("tokens"),
        )
        .sort("sent")
        .collect()
    )
    return [_Row(**row) for row in frame.iter_rows(named=True)]


def _half_gap(row: _Row) -> int:
    """Half of the row's mean gap between tokens, ns: stamps closer than this to one of
    its events are the same step (a server writes one step's tokens stream by stream)."""
    return (row.end - row.first) // max(1, 2 * (row.completion - 1))


def _prefill_company(
    rows: Sequence[_Row], sents: Sequence[int], i: int, reach: Sequence[int]
) -> int | None:
    """How many requests decoded beside row ``i``'s prefill (0: the server was idle), or
    None when its wait for the first token saw anything else: a request sent after it and
    before its first token, or one in flight at its send that was not yet decoding or
    ended before that first token (within half a gap: the step of the first token)."""
    row = rows[i]
    if bisect.bisect_left(sents, row.first) != i + 1:
        return None
    if i == 0 or reach[i - 1] <= row.sent:
        return 0
    decoding = 0
    for other in rows[bisect.bisect_right(reach, row.sent) : i]:
        if other.end <= row.sent:
            continue
        if other.first >= row.sent or other.end < row.first - _half_gap(other):
            return None
        decoding += 1
    return decoding


def _arrivals_during(
    rows: Sequence[_Row], sents: Sequence[int], i: int, reach: Sequence[int]
) -> tuple[float, ...] | None:
    """When row ``i`` was sent to an idle server and others were sent during its wait for
    its first token, each getting its own first token after it: their last bytes written,
    ms after row ``i``'s (wall time); else None."""
    row = rows[i]
    if row.written is None or (i > 0 and reach[i - 1] > row.sent):
        return None
    later = rows[i + 1 : bisect.bisect_left(sents, row.first)]
    if not later or any(o.first < row.first or o.written is None for o in later):
        return None
    return tuple((o.written - row.written) / 1e6 for o in later if o.written is not None)


def _decode_batch(
    rows: Sequence[_Row], sents: Sequence[int], reach: Sequence[int], i: int
) -> list[_Row] | None:
    """The rows decoding with row ``i`` over its whole decode span (itself first), or None
    when another request entered or left the batch during it. Rows sent before the first
    whose running latest end passes row ``i``'s first token had all ended before it.

    Stamps within half of row ``i``'s mean gap between tokens of its first token or its end
    count as the same step: a server writes one step's tokens to its streams one after
    another, so requests that started and ended together arrive some microseconds apart,
    in either order."""
    row = rows[i]
    batch = [row]
    slack = _half_gap(row)
    start = bisect.bisect_right(reach, row.first)
    for j in range(start, bisect.bisect_left(sents, row.end)):
        if j == i:
            continue
        other = rows[j]
        if other.end <= row.first:
            continue
        if other.first <= row.first + slack and other.end >= row.end - slack:
            batch.append(other)
        else:
            return None
    return batch


@dataclass(frozen=True, slots=True, kw_only=True)
class _Stretch:
    """A steady stretch of a decode span: the batch over it and the seconds per token."""

    batch: list[_Row]
    seconds_per_token: float


def _steady_stretch(
    rows: Sequence[_Row], sents: Sequence[int], reach: Sequence[int], i: int
) -> _Stretch | None:
    """The longest steady stretch of row ``i``'s decode span (see the module's rules), or
    None when no stretch has ``MIN_DECODE_GAPS`` gaps. Stamps of the events that bound a
    stretch are taken as the same step within half a gap, as in ``_decode_batch``."""
    row = rows[i]
    slack = _half_gap(row)
    others = [
        rows[j]
        for j in range(bisect.bisect_right(reach, row.first), bisect.bisect_left(sents, row.end))
        if j != i and rows[j].end > row.first
    ]
    cuts = sorted(
        {row.first, row.end}
        | {t for o in others for t in (o.sent, o.first, o.end) if row.first < t < row.end}
    )
    stamps = [row.sent + 1000 * offset for offset in row.offsets]
    weights = row.tokens if row.tokens is not None else [1] * len(stamps)
    best: _Stretch | None = None
    best_gaps = MIN_DECODE_GAPS - 1
    for low, high in pairwise(cuts):
        middle = (low + high) // 2
        if any(o.sent <= middle < o.first for o in others):
            continue  # another request waits for its first token: a step may prefill it
        inside = [
            k
            for k in range(len(stamps) - 1)
            if stamps[k] >= low - slack and stamps[k + 1] <= high - slack
        ]
        if len(inside) <= best_gaps:
            continue
        span_ns = stamps[inside[-1] + 1] - stamps[inside[0]]
        tokens = sum(weights[k + 1] for k in inside)
        batch = [row, *(o for o in others if o.first <= middle < o.end)]
        best_gaps = len(inside)
        best = _Stretch(batch=batch, seconds_per_token=span_ns / 1e9 / max(1, tokens))
    return best


def run_calibration_points(
    run: Path,
    *,
    model: str | None = None,
    gpu: str | None = None,
    tensor_parallel: int | None = None,
) -> RunPoints:
    """The prefill and decode observations of ``run`` (see the module's rules)."""
    deploy = run_deployment(run, model=model, gpu=gpu, tensor_parallel=tensor_parallel)
    rows = _rows(run)
    sents = [r.sent for r in rows]
    reach: list[int] = []
    for r in rows:
        reach.append(max(r.end, reach[-1]) if reach else r.end)
    scale = deploy.time_scale
    common = {"model": deploy.model, "gpu": deploy.gpu, "engine": deploy.engine}
    observations: list[Observation] = []
    by_server = by_ttft = decoded = not_idle = chunked = unknown_batch = stretches = beside = 0
    short = 0
    fronts: list[float] = []
    overlapped: list[OverlappedPrefill] = []
    last_alone: dict[tuple[int, int], float] = {}
    """The server-timed prefill of the last request alone, by (new, cached) tokens."""
    for i, row in enumerate(rows):
        new = row.prompt - row.cached
        if new >= 1:
            if deploy.chunk_tokens is not None and new > deploy.chunk_tokens:
                chunked += 1
            elif (company := _prefill_company(rows, sents, i, reach)) is None:
                not_idle += 1
                arrivals = _arrivals_during(rows, sents, i, reach)
                if arrivals is not None and row.prefill_ms is not None and row.prefill_ms > 0:
                    overlapped.append(
                        OverlappedPrefill(
                            new_tokens=new,
                            cached_tokens=row.cached,
                            prefill_ms=row.prefill_ms,
                            arrivals_ms=tuple(a / scale for a in arrivals),
                            alone_ms=last_alone.get((new, row.cached)),
                        )
                    )
            else:
                beside += 1 if company else 0
                if (
                    not company
                    and row.written
                    and row.queue_ms is not None
                    and row.prefill_ms is not None
                ):
                    client_ms = (row.first - row.written) / 1e6 / scale
                    fronts.append(client_ms - row.queue_ms - row.prefill_ms)
                if row.prefill_ms is not None and row.prefill_ms > 0:
                    seconds = row.prefill_ms / 1e3
                    by_server += 1
                    if not company:
                        last_alone[(new, row.cached)] = row.prefill_ms
                else:
                    seconds = (row.first - row.sent) / 1e9 / scale
                    by_ttft += 1
                if seconds > 0:
                    observations.append(
                        Observation(
                            phase="prefill",
                            tensor_parallel=deploy.prefill_tp,
                            new_tokens=new,
                            cached_tokens=row.cached,
                            prompt_tokens=row.prompt,
                            seconds=seconds,
                            decoding=company,
                            **common,  # type: ignore[arg-type]
                        )
                    )
        if row.completion < 2 or row.end <= row.first:
            continue
        if row.completion <= MIN_DECODE_GAPS:
            short += 1
            continue
        batch = _decode_batch(rows, sents, reach, i)
        if batch is not None:
            per_token_s = (
                row.decode_ms / 1e3
                if row.decode_ms is not None and row.decode_ms > 0
                else (row.end - row.first) / 1e9 / scale
            ) / (row.completion - 1)
            decoded += 1
        else:
            stretch = _steady_stretch(rows, sents, reach, i)
            if stretch is None:
                unknown_batch += 1
                continue
            batch, per_token_s = stretch.batch, stretch.seconds_per_token / scale
            stretches += 1
        context = sum(r.prompt + r.completion // 2 for r in batch) // len(batch)
        observations.append(
            Observation(
                phase="decode",
                tensor_parallel=deploy.decode_tp,
                new_tokens=1,
                cached_tokens=max(1, context),
                batch=len(batch),
                prompt_tokens=row.prompt,
                seconds=per_token_s,
                **common,  # type: ignore[arg-type]
            )
        )
    if not observations:
        raise BudgetError(
            f"{run}: no request gives a calibration point (none found the server idle or "
            "decoded at a constant batch); run a calibration sweep at low load"
        )
    return RunPoints(
        deployment=deploy,
        observations=tuple(median_observations(observations)),
        requests=len(rows),
        prefill_server=by_server,
        prefill_ttft=by_ttft,
        decode=decoded,
        not_idle=not_idle,
        chunked=chunked,
        decode_unknown_batch=unknown_batch,
        decode_stretches=stretches,
        decode_short=short,
        prefill_beside_decodes=beside,
        front_ends=tuple(fronts),
        overlapped=tuple(overlapped),
    )
