"""Load-aware budget predictions for the decomposition: the run replayed through the scheduler.

Without server timings the decomposition predicts prefill, KV transfer and first token
and books the rest of the server-side time as queue. Batch-1 predictions are right for a
request alone, but under load a chunked-prefill engine spreads a prompt over steps shared
with other sequences (each as long as the whole batch), so the truth can be twice the
batch-1 prefill and the excess would be booked as queue. ``load_aware_phases`` takes every
request of the run that reached the server (warm-up and trimmed rows too: they loaded it),
places it at its arrival on the server's clock (``request_written`` plus half the network
round trip, divided by the time scale) with its reported prompt, cached and generated
token counts, and replays them all through :func:`analyzers.budget.engine.timeline.replay_schedule`.

Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import polars as pl

from analyzers import exprs as e
from analyzers.budget.engine.timeline import Arrival, EngineShape, replay_schedule
from analyzers.budget.specs import Deployment
from analyzers.decompose.model import BudgetModel
from analyzers.errors import BudgetError
from traces import schema as s

ROW: Final = "_row"
"""The row number of a request in the scanned run, the key predictions join on."""
PHASE_COLS: Final = ("_l_queue", "_l_prefill", "_l_transfer", "_l_first", "_l_alone", "_l_wait")
"""Predicted queue, prefill, transfer and first token at the run's load, the prefill the
same replay gives the request alone, and the decode-side wait (disaggregated), ms (server
clock)."""
SECOND_COL: Final = "_l_second"
"""Predicted time from the first token to the second, ms (when the replay was asked for it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LoadAwareResult:
    """The replay's predictions (``frame``: ``ROW`` and ``PHASE_COLS``) and what it did."""

    frame: pl.DataFrame
    requests: int
    description: str


def empty_phases() -> pl.DataFrame:
    """The predictions frame with no rows."""
    return pl.DataFrame(schema={ROW: pl.UInt32, **dict.fromkeys(PHASE_COLS, pl.Float64)})


def _served(lf: pl.LazyFrame) -> pl.DataFrame:
    """Rows that reached the engine: the request was written and the server answered (200,
    or a status not recorded but a response seen)."""
    generated = (
        pl.col(s.COMPLETION_TOKENS)
        .cast(pl.Int64)
        .fill_null(pl.col(s.CHUNK_OFFSETS_US).list.len().cast(pl.Int64))
    )
    return (
        lf.filter(
            pl.col(s.REQUEST_WRITTEN_NS).is_not_null()
            & pl.coalesce(s.HEADERS_NS, s.FIRST_BYTE_NS, s.FIRST_TOKEN_NS).is_not_null()
            & (pl.col(s.HTTP_STATUS).fill_null(200) == 200)
        )
        .select(
            pl.col(ROW),
            pl.col(s.REQUEST_WRITTEN_NS),
            pl.col(s.PROMPT_TOKENS).cast(pl.Int64).fill_null(e.requested_prompt_tokens()),
            pl.col(s.CACHED_TOKENS).fill_null(0).cast(pl.Int64),
            pl.when(generated > 0)
            .then(generated)
            .otherwise(pl.col(s.OUTPUT_TOKENS).cast(pl.Int64))
            .clip(lower_bound=1),
        )
        .sort(s.REQUEST_WRITTEN_NS)
        .collect()
    )


def served_arrivals(lf: pl.LazyFrame, *, network_ms: float, time_scale: float) -> list[Arrival]:
    """Every request of ``lf`` (which carries ``ROW``) that reached the engine, at its
    arrival on the server's clock (``request_written`` plus half the round trip, over the
    time scale, from the first), with its reported token counts, in arrival order."""
    rows = _served(lf)
    if rows.height == 0:
        return []
    t0 = int(rows.get_column(s.REQUEST_WRITTEN_NS).min())  # type: ignore[arg-type]
    one_way_s = max(0.0, network_ms) / 2e3
    return [
        Arrival(
            key=int(row),
            arrival_s=(written - t0) / 1e9 / time_scale + one_way_s,
            prompt_tokens=max(1, int(prompt)),
            output_tokens=int(out),
            cached_tokens=max(0, int(cached)),
        )
        for row, written, prompt, cached, out in rows.iter_rows()
    ]


def load_aware_phases(
    lf: pl.LazyFrame,
    budget: BudgetModel,
    *,
    network_ms: float,
    time_scale: float,
    deployment: Deployment | None = None,
    max_steps: int = 1_000_000,
    second_token: bool = False,
    alone: bool = True,
) -> LoadAwareResult:
    """Predicted phases of every served request of ``lf`` (which carries ``ROW``) under the
    run's own load; ``deployment`` overrides the budget's (a calibrated one); with
    ``second_token`` also ``SECOND_COL`` (first to second token, ms; null: none); without
    ``alone`` the prefill alone (``_l_alone``) is null, not replayed (the fits that search
    a deployment do not need it). Raises ``BudgetError`` when the replay is too long
    (``max_steps``) or the shape is invalid."""
    arrivals = served_arrivals(lf, network_ms=network_ms, time_scale=time_scale)
    if not arrivals:
        return LoadAwareResult(frame=empty_phases(), requests=0, description="no served request")
    by_key = {a.key: a for a in arrivals}
    deploy = deployment or budget.deployment
    shape = EngineShape(
        model=budget.model,
        deployment=deploy,
        replicas=budget.replicas,
        decode_instances=budget.decode_instances if budget.link is not None else 0,
        link=budget.link,
        max_num_seqs=budget.max_num_seqs,
    )
    phases = replay_schedule(arrivals, shape, max_steps=max_steps, second_token=second_token)
    alone_ms = _alone_prefill_ms(arrivals, shape) if alone else {}
    frame = pl.DataFrame(
        [
            (
                key,
                p.queue_s * 1e3,
                p.prefill_s * 1e3,
                p.transfer_s * 1e3,
                p.first_token_s * 1e3,
                alone_ms.get((a.prompt_tokens, a.cached_tokens)),
                p.decode_wait_s * 1e3,
                None if p.second_token_s is None else p.second_token_s * 1e3,
            )
            for key, p in phases.items()
            for a in (by_key[key],)
        ],
        schema={ROW: pl.UInt32, **dict.fromkeys((*PHASE_COLS, SECOND_COL), pl.Float64)},
        orient="row",
    )
    topology = (
        f"{shape.replicas} prefill + {shape.decode_instances} decode instance(s)"
        if shape.disaggregated
        else f"{shape.replicas} replica(s)"
    )
    chunk = f"{deploy.chunk_tokens}-token steps" if deploy.chunk_tokens else "unchunked prefill"
    if not second_token:
        frame = frame.drop(SECOND_COL)
    return LoadAwareResult(
        frame=frame,
        requests=len(arrivals),
        description=(
            f"schedule replay of {len(arrivals):,} served requests on {topology}, "
            f"{chunk}, up to {shape.max_num_seqs} sequences"
        ),
    )


def _alone_prefill_ms(arrivals: list[Arrival], shape: EngineShape) -> dict[tuple[int, int], float]:
    """The replay's prefill of each distinct (prompt, cached) pair with nothing else running
    (the chunks of a long prompt are separate steps), ms."""
    out: dict[tuple[int, int], float] = {}
    for a in arrivals:
        pair = (a.prompt_tokens, a.cached_tokens)
        if pair not in out:
            alone = Arrival(
                key=0, arrival_s=0.0, prompt_tokens=pair[0], output_tokens=1, cached_tokens=pair[1]
            )
            phases = replay_schedule([alone], shape).get(0)
            out[pair] = phases.prefill_s * 1e3 if phases is not None else float("nan")
    return out


def predict_phases(
    lf: pl.LazyFrame,
    budget: BudgetModel,
    *,
    network_ms: float,
    time_scale: float,
    load_aware: bool,
    deployment: Deployment | None,
    calibrated: bool,
    max_steps: int,
) -> tuple[str, pl.DataFrame]:
    """How the server terms are predicted, and the replay's phases: none at batch 1
    (``load_aware`` off, or the replay failed, the description says why)."""
    batch_1 = "batch-1 budget" + (" (calibrated)" if calibrated else "")
    if not load_aware:
        return batch_1, empty_phases()
    try:
        replay = load_aware_phases(
            lf,
            budget,
            network_ms=network_ms,
            time_scale=time_scale,
            deployment=deployment,
            max_steps=max_steps,
        )
    except BudgetError as exc:
        return f"batch-1 predictions ({exc})", empty_phases()
    if replay.requests and calibrated:
        return replay.description + ", at the calibrated efficiency", replay.frame
    return replay.description, replay.frame
