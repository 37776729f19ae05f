"""The prefix-cache chart of one run: per session turn depth, the share of prompt tokens the
trace's prefixes allow to be cached beside the share the server reported cached.

Every number drawn comes from ``analyzers.analysis.Analysis`` (``cache_by_turn`` and the
overall ``Fidelity``, computed by ``analyzers.metrics`` and ``analyzers.cache``); the
function only places it. Must not import loadgen.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from analyzers.analysis import Analysis
from reports.charts.figure import Chart, no_data, render
from reports.theme import MUTED_SENTINEL, OKABE_ITO

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def _id(prefix: str, name: str) -> str:
    clean = "".join(ch if ch.isalnum() else "-" for ch in prefix).strip("-")
    return f"{clean}-{name}" if clean else name


def cache_depth_chart(a: Analysis, *, prefix: str = "") -> Chart:
    """Expected (hatched) and reported (solid) cached share of prompt tokens per turn
    depth, token-weighted, with the run's overall shares as lines."""
    depths = a.cache_by_turn
    compared = [d.expected for d in depths]
    has_expected = any(c is not None for c in compared)
    overall = a.overall.fidelity

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        if not depths:
            no_data(ax, "no session turns")
            return
        turns = [d.turn for d in depths]
        width = 0.4 if has_expected else 0.7
        reported_x = [t + width / 2 for t in turns] if has_expected else turns
        if has_expected:
            shares = [100 * (c.expected_share or 0.0) if c is not None else 0.0 for c in compared]
            ax.bar(
                [t - width / 2 for t in turns],
                shares,
                width=width,
                color="none",
                edgecolor=OKABE_ITO[0],
                hatch="//",
                label="expected (the trace's prefixes)",
            )
        ax.bar(
            reported_x,
            [100 * d.share for d in depths],
            width=width,
            color=OKABE_ITO[1],
            label="reported by the server",
        )
        cmp = overall.expected
        if cmp is not None and cmp.expected_share is not None:
            ax.axhline(
                100 * cmp.expected_share,
                color=OKABE_ITO[0],
                linestyle=(0, (6, 3)),
                linewidth=1.2,
                label=f"expected, all requests {100 * cmp.expected_share:.1f}%",
            )
        if overall.cached_share is not None:
            ax.axhline(
                100 * overall.cached_share,
                color=MUTED_SENTINEL,
                linestyle=":",
                linewidth=1.2,
                label=f"reported, all requests {100 * overall.cached_share:.1f}%",
            )
        ax.set_xlabel("turn depth within the session (1: first turn)")
        ax.set_ylabel("cached share of prompt tokens (%)")
        ax.set_ylim(0, 100)
        step = max(1, len(turns) // 20)
        ax.set_xticks(turns[::step])
        fig.legend(loc="outside upper center", ncols=2)

    basis = a.cache_basis
    caption = (
        "Token-weighted per turn depth: cached prompt tokens over prompt tokens, summed over "
        "the session turns at that depth (requests with a reported prompt)."
    )
    if basis is not None and basis.available:
        caption += (
            f" Expected: an ideal, unbounded prefix cache over the trace's prefix blocks "
            f"({basis.trace_block_size} tokens per block id) in the order the requests were "
            f"sent, hitting whole KV blocks of {basis.kv_block_size} tokens "
            f"({basis.kv_block_source})."
        )
    elif basis is not None:
        caption += f" No expectation: {basis.unavailable}."
    return render(
        _id(prefix, "cache-depth"),
        "Prefix cache by turn depth",
        caption,
        draw,
        height_in=3.8,
    )
