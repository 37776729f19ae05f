"""The decomposition's vocabulary: its terms, the columns of the per-request frame and
where a term's values came from (:mod:`analyzers.decompose.terms` fills them).

Must not import loadgen or httpx.
"""

from __future__ import annotations

from typing import Final, Literal

import polars as pl

from analyzers import exprs as e

CLIENT_TERMS: Final = ("client_delay", "connect", "write")
SERVER_TERMS: Final = ("network", "queue", "prefill", "transfer", "decode_wait", "first_token")
TERMS: Final = CLIENT_TERMS + SERVER_TERMS
"""Every term, in chain order; column ``{term}_ms`` holds it, ``budget_{term}_ms`` its budget."""

TOTAL_MS: Final = e.TTFT_FROM_DUE_MS
SERVER_SIDE_MS: Final = "server_side_ms"
OVERSHOOT_MS: Final = "overshoot_ms"
NETWORK_UNIDENTIFIED: Final = "network_unidentified"
"""True where the server's TTFT exceeds the client's view: the network is not identifiable."""
IN_FLIGHT: Final = "in_flight"
IN_FLIGHT_TO_FIRST: Final = "_in_flight_to_first"
"""Requests in flight at some moment between a request's send and its first token, itself
included: how many it may have shared the server with (the calibration's samples)."""
UNCACHED: Final = "uncached_prompt_tokens"
PROMPT: Final = "prompt_tokens_used"

TermSource = Literal[
    "measured",
    "server",
    "headers",
    "budget",
    "calibrated",
    "schedule",
    "steps",
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


NETWORK_MS: Final = "_net"
"""Each request's own network round trip (null: unidentified), ms, server clock."""
NETWORK_SOURCE: Final = "_net_src"
NEGATIVE_SLACK_MS: Final = 1e-3
"""A server-reported term this far below 0 is rounding, read as 0; further is unidentified."""


def non_negative(value: pl.Expr) -> pl.Expr:
    """``value`` where >= 0 (rounding below it read as 0); null where clearly negative."""
    return pl.when(value >= 0).then(value).when(value > -NEGATIVE_SLACK_MS).then(0.0)
