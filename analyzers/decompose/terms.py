"""TTFT decomposition, per request: the client chain and the server split, as one frame.

For every ok request with a first content token, ``first_token - due`` is split into::

    client_delay  sent - due                         (the generator's lateness)
    connect       connected - sent                   (pool wait + TCP/TLS; 0 when reused)
    write         request_written - (connected | sent)
    network       round trip on the wire             ┐
    queue         waiting in the server              │ first_token - request_written
    prefill       computing the uncached prompt      │ (the server split)
    transfer      KV transfer (disaggregated)        │
    decode_wait   KV arrived -> decode step starts   │ (disaggregated)
    first_token   the decode step of the first token ┘

Server terms come from the server's own timings where reported (and not hidden), the
network then being ``(first_token - request_written) - server_ttft``. Otherwise they are
predicted by the budget model, optionally calibrated on the run's low-load requests: by
default at the run's own load, replaying every served request through the engine's
batching policy (``analyzers.decompose.load``: a prompt's prefill stretched over the
steps it shares, the KV link's queue, the decode batch's step for the first token); with
``load_aware=False`` (or when the replay cannot run) at batch 1 (prefill of ``prompt -
cached`` tokens, one decode step for the first token or none, the KV transfer over the
budget's link or none). On a slot engine (``BudgetModel.slot_admission``: llama.cpp) the
prefill is instead read from the run (:mod:`analyzers.decompose.slotprefill`: its
response heads, else its steps). The network is each request's own
(``request_network`` of :mod:`analyzers.decompose.network`: the server's TTFT
subtracted, else its response head read before its first token, else its fresh
connection's handshake, else the run's estimate), and the queue is the remainder,
clamped at 0; a negative remainder is kept as ``overshoot_ms`` (<= 0) so the parts still
add up. No term is ever negative: a server-reported term below 0 (or a network the
server's TTFT makes negative) is null, "unidentified", and ``RequestTerms.unidentified``
says for how many requests and why. The ``budget_*`` columns stay the batch-1 budget,
except the queue's, which is the replay's predicted queue (null without a replay). The
budget model the predictions come from is ``analyzers.decompose.model``'s
``BudgetModel``. With ``calibrate`` and no chunk size in the deployment, the chunk size
is fitted from the run too (``fit_chunk`` of :mod:`analyzers.decompose.fits`). The
term and column names are :mod:`analyzers.decompose.columns`'s.

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

from pathlib import Path
from typing import Final

import polars as pl

from analyzers import exprs as e
from analyzers.budget.decode import decode_step_time_s
from analyzers.budget.kv import kv_transfer_time_s
from analyzers.budget.prefill import prefill_time_s
from analyzers.decompose.columns import (
    CLIENT_TERMS,
    IN_FLIGHT,
    IN_FLIGHT_TO_FIRST,
    NEGATIVE_SLACK_MS,
    NETWORK_MS,
    NETWORK_SOURCE,
    NETWORK_UNIDENTIFIED,
    OVERSHOOT_MS,
    PROMPT,
    SERVER_SIDE_MS,
    TOTAL_MS,
    UNCACHED,
    TermSource,
    budget_col,
    non_negative,
    term_col,
)
from analyzers.decompose.fits import (
    calibrated_prefill,
    fit_prefill,
    fit_replay_deployment,
)
from analyzers.decompose.load import (
    ROW,
    empty_phases,
    predict_phases,
)
from analyzers.decompose.model import BudgetModel
from analyzers.decompose.network import network_term_source, request_network, run_network
from analyzers.decompose.options import DecomposeOptions
from analyzers.decompose.results import (
    RequestTerms,
    SourceOf,
    Unidentified,
)
from analyzers.decompose.slotprefill import SLOT_PREFILL, read_slot_prefill
from analyzers.errors import AnalyzerError
from analyzers.frames import scan_run, select_rows
from traces import schema as s

_SERVER_COLS: Final = {
    "queue": s.SERVER_QUEUE_MS,
    "prefill": s.SERVER_PREFILL_MS,
    "transfer": s.SERVER_TRANSFER_MS,
    "decode_wait": s.SERVER_DECODE_WAIT_MS,
    "first_token": s.SERVER_FIRST_TOKEN_MS,
    "ttft": s.SERVER_TTFT_MS,
}


def in_flight_at_send() -> pl.Expr:
    """Requests in flight when each request was sent, itself included: sent at or before
    it, minus ended at or before it (a request that never ended stays in flight)."""
    sent = pl.col(s.SENT_NS)
    started = sent.drop_nulls().sort().search_sorted(sent, side="right").cast(pl.Int64)
    return pl.when(sent.is_not_null()).then(started - _ended_by_send()).alias(IN_FLIGHT)


def _ended_by_send() -> pl.Expr:
    """Requests ended at or before each request's send."""
    ended = pl.col(s.END_NS).drop_nulls().sort()
    return ended.search_sorted(pl.col(s.SENT_NS), side="right").cast(pl.Int64)


def in_flight_to_first_token() -> pl.Expr:
    """Requests in flight at some moment between each request's send and its first token,
    itself included: sent before its first token, minus ended at or before its send. A
    request sent alone that others joined before its first token counts them."""
    sent, first = pl.col(s.SENT_NS), pl.col(s.FIRST_TOKEN_NS)
    started = sent.drop_nulls().sort().search_sorted(first, side="left").cast(pl.Int64)
    return (
        pl.when(sent.is_not_null() & first.is_not_null())
        .then(started - _ended_by_send())
        .alias(IN_FLIGHT_TO_FIRST)
    )


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
        lf.with_columns(in_flight_at_send(), in_flight_to_first_token())
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
            pl.col(IN_FLIGHT_TO_FIRST),
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


def _unidentified(frame: pl.DataFrame) -> tuple[Unidentified, ...]:
    """The terms left null for some requests, with the reason."""
    out: list[Unidentified] = []
    negative_network = frame.filter(pl.col(NETWORK_SOURCE) == "unidentified").height
    if negative_network:
        out.append(
            Unidentified(
                term="network",
                requests=negative_network,
                reason="the server's reported TTFT exceeds the client's server-side time "
                "(first token - request written): the clocks disagree",
            )
        )
    for term in ("queue", "prefill", "transfer", "decode_wait", "first_token"):
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
        embeddings = lf.select((pl.col(s.API).cast(pl.String) == s.API_EMBEDDINGS).all())
        hint = (
            " (embeddings requests stream no token: their latency is E2E, see loadgen analyze)"
            if embeddings.collect().item()
            else ""
        )
        raise AnalyzerError(f"{run}: no ok request with a first token to decompose{hint}")
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
    slot_engine = budget is not None and budget.slot_admission
    network = run_network(frame, options, heads_start_work=slot_engine)
    frame = request_network(frame, network, heads_start_work=slot_engine)
    calibration = None
    deploy = None
    budget_prefill = pl.col("_p_prefill")
    prefill_fallback: TermSource = "budget"
    if options.calibrate and budget is not None:
        calibration = fit_prefill(frame, budget, network.value_ms, options)
        if needs_prediction:
            calibration, deploy = fit_replay_deployment(
                scanned, frame, budget, calibration, network.value_ms, options
            )
        eff = (calibration.fraction_of_peak or budget.deployment.prefill_efficiency) or 1.0
        frame = frame.join(
            calibrated_prefill(keys, calibration, budget, eff),
            on=[UNCACHED, s.CACHED_TOKENS, PROMPT],
        )
        budget_prefill = pl.col("_c")
        prefill_fallback = "calibrated"
    prediction, phases = "", empty_phases()
    if budget is not None and needs_prediction:
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
    if budget is not None and slot_engine and needs_prediction:
        read = read_slot_prefill(frame, scanned, budget, options.time_scale)
        frame = read.frame
        prefill_fallback = read.source or prefill_fallback
        prediction = f"{prediction}; {read.line}" if prediction else read.line
    else:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Float64).alias(SLOT_PREFILL))
    split = _server_split(frame, network.value_ms, budget_prefill, options)
    unidentified = _unidentified(split)
    network_source = network_term_source(split)
    terms = split.drop([c for c in split.columns if c.startswith("_")])
    counts = {t: frame.get_column(f"_s_{t}").drop_nulls().len() for t in _SERVER_COLS}
    other_fallback: TermSource = "schedule" if phases.height else "budget"
    n = frame.height
    sources = (
        *(SourceOf(term=t, source="measured") for t in CLIENT_TERMS),
        SourceOf(term="network", source=network_source),
        SourceOf(term="queue", source=_source(counts["queue"], n, "remainder")),
        SourceOf(term="prefill", source=_source(counts["prefill"], n, prefill_fallback)),
        SourceOf(term="transfer", source=_source(counts["transfer"], n, other_fallback)),
        SourceOf(term="decode_wait", source=_source(counts["decode_wait"], n, other_fallback)),
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
        return pl.when(server.is_null()).then(predicted).otherwise(non_negative(server))

    prefill = split("prefill", pl.col(SLOT_PREFILL), pl.col("_l_prefill"), budget_prefill)
    transfer = split("transfer", pl.col("_l_transfer"), pl.col("_p_transfer"))
    first = split("first_token", pl.col("_l_first"), pl.col("_p_first"))
    # A server that reports its first token but no decode wait counts the wait in it: 0.
    wait = (
        pl.when(pl.col("_s_decode_wait").is_null() & pl.col("_s_first_token").is_not_null())
        .then(0.0)
        .otherwise(split("decode_wait", pl.col("_l_wait"), pl.lit(0.0)))
    )
    remainder = side - network_in_split - pl.col(term_col("prefill"))
    remainder = remainder - pl.col(term_col("transfer")) - pl.col(term_col("first_token"))
    remainder = remainder - pl.col(term_col("decode_wait"))
    queue_is_remainder = pl.col("_s_queue").is_null()
    tolerance = pl.max_horizontal(
        pl.lit(options.overshoot_tolerance_ms), side * options.overshoot_tolerance
    )
    out = frame.with_columns(
        network.alias(term_col("network")),
        prefill.alias(term_col("prefill")),
        transfer.alias(term_col("transfer")),
        wait.alias(term_col("decode_wait")),
        first.alias(term_col("first_token")),
    ).with_columns(
        pl.when(queue_is_remainder)
        .then(remainder.clip(lower_bound=0.0))
        .otherwise(non_negative(pl.col("_s_queue")))
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
        pl.lit(0.0).alias(budget_col("decode_wait")),
        pl.col("_p_first").alias(budget_col("first_token")),
        pl.col("_l_queue").alias(budget_col("queue")),
    )
    return out
