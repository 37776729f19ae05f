"""The network term of the decomposition: the run's round trip (``run_network``: a probe,
the server's TTFT subtracted, the bytes before the first token, or the residual) and each
request's own (``request_network``: the server's TTFT subtracted, else its response head
read before its first token unless the run's heads track the server's work, else its fresh
connection's handshake, else the run's estimate). A server known to write its head when
its work on a request starts (a slot engine: llama-server writes it when a slot starts the
prompt) never has its heads read as the network: its handshakes are.

Must not import loadgen or httpx.
"""

from __future__ import annotations

from typing import Final

import polars as pl

from analyzers.decompose.columns import (
    NETWORK_MS,
    NETWORK_SOURCE,
    SERVER_SIDE_MS,
    TermSource,
    non_negative,
)
from analyzers.decompose.options import DecomposeOptions
from analyzers.decompose.results import (
    NetworkEstimate,
)


def _quantile(frame: pl.DataFrame, column: str, percentile: float) -> float | None:
    values = frame.get_column(column).drop_nulls()
    if values.len() == 0:
        return None
    q = values.quantile(percentile / 100, interpolation="linear")
    return float(q) if q is not None else None


def run_network(
    frame: pl.DataFrame, options: DecomposeOptions, *, heads_start_work: bool = False
) -> NetworkEstimate:
    """The run's round trip: a probe's; the server's TTFT subtracted; the bytes read before
    the first token (unless the server writes its head when its work on a request starts,
    ``heads_start_work``: then the fresh connections' handshakes); what the predictions
    leave."""
    if options.network_ms is not None:
        return NetworkEstimate(value_ms=options.network_ms, source="probe")
    p = options.network_percentile
    from_server = frame.select(
        (pl.col(SERVER_SIDE_MS) - pl.col("_s_ttft")).clip(lower_bound=0).alias("_n")
    )
    value = _quantile(from_server, "_n", p)
    if value is not None:
        return NetworkEstimate(value_ms=value, source="server")
    column, source = (
        ("_connect_rtt_ms", "handshake") if heads_start_work else ("_early_byte_ms", "first_byte")
    )
    value = _quantile(frame, column, p)
    if value is not None:
        return NetworkEstimate(value_ms=max(0.0, value), source=source)
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


def request_network(
    frame: pl.DataFrame, run_level: NetworkEstimate, *, heads_start_work: bool = False
) -> pl.DataFrame:
    """Each request's network round trip (``NETWORK_MS``) and where it came from.

    In order: a probe's value (given for the run); ``server``: the client's server-side
    time minus the server's reported TTFT (null where that is negative: the two clocks
    disagree and the split of that request is unidentified); ``headers``: the response head
    (else the first byte) read before the first token, ``head - request_written``, unless
    the run's heads track its server-side times (``_heads_on_receipt``) or the server is
    known to write its head when its work on the request starts (``heads_start_work``: a
    slot engine, llama.cpp); the TCP handshake of the request's fresh connection; the
    run's estimate (``estimate``)."""
    if run_level.source == "probe":
        return frame.with_columns(
            pl.lit(run_level.value_ms).alias(NETWORK_MS), pl.lit("estimate").alias(NETWORK_SOURCE)
        )
    side = pl.col(SERVER_SIDE_MS)
    server = side - pl.col("_s_ttft")
    # A head cannot take longer than the first token: bound by the server-side time.
    head = pl.coalesce(pl.col("_head_ms"), pl.col("_early_byte_ms"))
    head = pl.when(head.is_not_null()).then(pl.min_horizontal(head.clip(lower_bound=0.0), side))
    if heads_start_work or not _heads_on_receipt(frame, head):
        head = pl.lit(None, dtype=pl.Float64)
    rtt = pl.col("_connect_rtt_ms")
    rtt = pl.when(rtt.is_not_null()).then(pl.min_horizontal(rtt.clip(lower_bound=0.0), side))
    has_server = pl.col("_s_ttft").is_not_null()
    return frame.with_columns(
        pl.when(has_server)
        .then(non_negative(server))
        .otherwise(pl.coalesce(head, rtt, pl.lit(run_level.value_ms)))
        .alias(NETWORK_MS),
        pl.when(has_server)
        .then(pl.when(non_negative(server).is_null()).then(pl.lit("unidentified")))
        .otherwise(
            pl.when(head.is_not_null())
            .then(pl.lit("headers"))
            .when(rtt.is_not_null())
            .then(pl.lit("measured"))
            .otherwise(pl.lit("estimate"))
        )
        .fill_null(pl.lit("server"))
        .alias(NETWORK_SOURCE),
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


def network_term_source(frame: pl.DataFrame) -> TermSource:
    found = set(frame.get_column(NETWORK_SOURCE).unique().to_list()) - {"unidentified"}
    if len(found) == 1:
        only = found.pop()
        for source in ("server", "headers", "measured", "estimate"):
            if only == source:
                return source
    return "mixed" if found else "unidentified"
