"""What the per-request decomposition returns: the frame (``RequestTerms``), the run's
network estimate, the calibration fit, each term's source and what stays unidentified.

Must not import loadgen or httpx.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import polars as pl

from analyzers.decompose.columns import (
    TermSource,
)
from analyzers.decompose.model import BudgetModel


@dataclass(frozen=True, slots=True, kw_only=True)
class NetworkEstimate:
    """The run's network round trip (ms) and how it was found: ``probe`` (given),
    ``server`` (``first_token - written - server_ttft``), ``first_byte`` (bytes the server
    sent before its first token), ``handshake`` (fresh connections' TCP handshakes, where
    the server's heads start its work), ``residual`` (what the predictions leave)."""

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
    efficiency_from_load: bool = False
    """The prefill efficiency (``fraction_of_peak``) was refitted so that the replay of the
    whole run explains its server-side times: the low-load requests had still waited for a
    slot or shared steps, so the line fitted to them was too slow, and its quadratic
    (``a_ms``...) is dropped."""

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
