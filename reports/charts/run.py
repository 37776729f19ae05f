"""Charts of one run: TTFT CDFs with the SLO, the TTFT decomposition against its budget,
latency over time with the offered load and in-flight count, the ITL distribution,
throughput over time, and prompt fidelity.

Every number drawn comes from ``analyzers`` (``analysis.Analysis``,
``decompose.Decomposition``, ``timeseries.RunSeries``); the functions only place it. Every
axis names its unit. Must not import loadgen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from analyzers import exprs as e
from analyzers.analysis import Analysis
from analyzers.decompose import TERMS, ClassDecomposition, Decomposition
from analyzers.timeseries import Cdf, RunSeries
from reports.charts.figure import Chart, no_data, render, wide_range
from reports.theme import MUTED_SENTINEL, OKABE_ITO, SLO_COLOUR, series_colour

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

TERM_COLOURS: Final = dict(zip(TERMS, OKABE_ITO[::-1], strict=True))
"""One Okabe-Ito colour per TTFT term (grey for the client delay, the rarest term)."""

_TAIL_TICKS: Final = (50.0, 90.0, 99.0, 99.9, 99.99, 99.999)


def _id(prefix: str, name: str) -> str:
    """A chart id, made unique per run with ``prefix`` (letters, digits and dashes only)."""
    clean = "".join(ch if ch.isalnum() else "-" for ch in prefix).strip("-")
    return f"{clean}-{name}" if clean else name


def _class_label(workload: str) -> str:
    return "all requests" if workload == e.ALL else workload


def _cdf_curves(series: RunSeries, metric: str) -> list[Cdf]:
    """The run's curve, then each class's when there are several classes."""
    curves = [series.cdf(e.ALL, metric)]
    if len(series.classes) > 1:
        curves += [series.cdf(c, metric) for c in series.classes]
    return [c for c in curves if c.count]


def _slo_line(ax: Axes, slo_ms: float | None, *, vertical: bool) -> None:
    if slo_ms is None:
        return
    style = {"color": SLO_COLOUR, "linestyle": (0, (6, 3)), "linewidth": 1.4}
    label = f"SLO {slo_ms:g} ms"
    if vertical:
        ax.axvline(slo_ms, label=label, **style)  # type: ignore[arg-type]
    else:
        ax.axhline(slo_ms, label=label, **style)  # type: ignore[arg-type]


def ttft_cdf_chart(series: RunSeries, slo_ttft_ms: float | None, *, prefix: str = "") -> Chart:
    """TTFT from due: the CDF per class (left) and the tail by percentile (right)."""
    curves = _cdf_curves(series, e.TTFT_FROM_DUE_MS)
    sent = series.cdf(e.ALL, e.TTFT_MS)

    def draw(fig: Figure) -> None:
        left, right = fig.subplots(1, 2)
        if not curves:
            no_data(left)
            no_data(right)
            return
        values = [v for c in curves for v in c.values_ms]
        for i, c in enumerate(curves):
            label = _class_label(c.workload) + f" (n={c.count:,})"
            colour = series_colour(i)
            left.step(c.values_ms, c.fractions, where="post", color=colour, label=label)
            tail = [(v, f) for v, f in zip(c.values_ms, c.fractions, strict=True) if f < 1.0]
            if tail:
                right.plot(
                    [1 / (1 - f) for _, f in tail], [v for v, _ in tail], color=colour, label=label
                )
        if sent.count:
            left.step(
                sent.values_ms,
                sent.fractions,
                where="post",
                color=MUTED_SENTINEL,
                linestyle=":",
                label="all, TTFT from send",
            )
        _slo_line(left, slo_ttft_ms, vertical=True)
        _slo_line(right, slo_ttft_ms, vertical=False)
        if wide_range(values):
            left.set_xscale("log")
        left.set_xlabel("TTFT from due (ms)")
        left.set_ylabel("fraction of ok requests")
        left.set_ylim(0, 1.02)
        left.set_title("CDF")
        left.legend(loc="lower right")
        right.set_xscale("log")
        top = max((f for c in curves for f in c.fractions if f < 1.0), default=0.99)
        shown = [p for p in _TAIL_TICKS if p / 100 <= max(top, 0.99)]
        right.set_xticks([100 / (100 - p) for p in shown], [f"p{p:g}" for p in shown])
        right.minorticks_off()
        right.set_xlim(1.8, 1.25 / (1 - max(top, shown[-1] / 100)))
        right.set_xlabel("percentile (log scale of 1 / (1 - p))")
        right.set_ylabel("TTFT from due (ms)")
        if wide_range(values):
            right.set_yscale("log")
        right.set_title("Tail")

    caption = (
        "Time to first token measured from each request's due time (what a user waits, "
        "including any lateness of the generator), over ok requests; the dotted line is the "
        "run's TTFT from send. Right: the same distribution by percentile, so the tail is "
        "readable."
    )
    if slo_ttft_ms is not None:
        caption += f" Dashed: the {slo_ttft_ms:g} ms SLO."
    return render(_id(prefix, "ttft-cdf"), "TTFT distribution", caption, draw, height_in=4.0)


def _decomposition_classes(d: Decomposition) -> list[ClassDecomposition]:
    return [d.overall, *d.classes] if len(d.classes) > 1 else [d.overall]


def decomposition_chart(d: Decomposition, *, prefix: str = "") -> Chart:
    """Per class, at each percentile: the tail's mean composition (solid) beside the budget
    of each term (hatched), stacked in chain order, with the SLO."""
    classes = _decomposition_classes(d)
    slo = d.options.slo_ttft_ms

    def draw(fig: Figure) -> None:
        axes = fig.subplots(1, len(classes), squeeze=False)[0]
        for ax, c in zip(axes, classes, strict=True):
            _decomposition_panel(ax, c, slo)
        from matplotlib.patches import Patch

        handles, _ = axes[0].get_legend_handles_labels()
        handles += [
            Patch(facecolor="none", edgecolor=MUTED_SENTINEL, label="solid: the run's tail"),
            Patch(
                facecolor="none",
                edgecolor=MUTED_SENTINEL,
                hatch="///",
                label="hatched: budget",
            ),
        ]
        fig.legend(handles=handles, loc="outside right upper")
        fig.supxlabel(
            "percentile of TTFT from due (left bar: the tail's mean, right bar: the budget)",
            fontsize=10,
        )

    caption = (
        "For the requests at or beyond each percentile of TTFT from due (the tail), the mean "
        "of each term, stacked in chain order (solid, they add up to the tail's mean TTFT), "
        "beside each term's budget (hatched). Terms without a budget are drawn at 0 on the "
        "budget bar."
    )
    if slo is not None:
        caption += f" Dashed: the {slo:g} ms SLO (the queue's budget is the SLO's slack)."
    height = 4.4 if len(classes) == 1 else 4.8
    return render(
        _id(prefix, "ttft-decomposition"),
        "TTFT decomposition vs budget",
        caption,
        draw,
        height_in=height,
    )


def _decomposition_panel(ax: Axes, c: ClassDecomposition, slo: float | None) -> None:
    tails = c.tails
    if not tails:
        no_data(ax)
        return
    xs = list(range(len(tails)))
    width = 0.38
    run_base = [0.0] * len(tails)
    budget_base = [0.0] * len(tails)
    for term in TERMS:
        colour = TERM_COLOURS[term]
        heights = [t.term(term).tail_mean_ms or 0.0 for t in tails]
        budgets = [t.term(term).budget_ms or 0.0 for t in tails]
        ax.bar(
            [x - width / 2 for x in xs],
            heights,
            width,
            bottom=run_base,
            color=colour,
            label=term,
            edgecolor="none",
        )
        ax.bar(
            [x + width / 2 for x in xs],
            budgets,
            width,
            bottom=budget_base,
            color=colour,
            alpha=0.45,
            hatch="///",
            edgecolor=MUTED_SENTINEL,
            linewidth=0.3,
        )
        run_base = [a + b for a, b in zip(run_base, heights, strict=True)]
        budget_base = [a + b for a, b in zip(budget_base, budgets, strict=True)]
    _slo_line(ax, slo, vertical=False)
    ax.set_xticks(xs, [f"p{t.percentile:g}" for t in tails])
    ax.set_ylabel("time (ms)")
    ax.set_title(f"{_class_label(c.workload)} ({c.requests:,} requests)")
    ax.grid(axis="x", visible=False)


def _opt_xy(xs: Sequence[float], ys: Sequence[float | None]) -> tuple[list[float], list[float]]:
    pairs = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def latency_over_time_chart(
    series: RunSeries, slo_ttft_ms: float | None, *, prefix: str = ""
) -> Chart:
    """TTFT, TPOT and E2E of sampled requests by send time with the windows' p50 and p99,
    above the offered load, completions and in-flight count."""
    w = series.windows
    sm = series.samples
    mids = [t + w.window_s / 2 for t in w.start_s]
    panels = (
        ("TTFT (ms)", e.TTFT_MS, sm.ttft_ms),
        ("TPOT (ms/token)", e.TPOT_MS, sm.tpot_ms),
        ("E2E (ms)", e.E2E_MS, sm.e2e_ms),
    )

    def draw(fig: Figure) -> None:
        axes = fig.subplots(4, 1, sharex=True, height_ratios=(1, 1, 1, 1.1))
        for ax, (label, key, values) in zip(axes, panels, strict=False):
            xs, ys = _opt_xy(sm.send_s, values)
            ax.scatter(xs, ys, s=10, color=OKABE_ITO[4], alpha=0.8, linewidths=0, label="request")
            mw = w.metric(key)
            px, py = _opt_xy(mids, mw.p50_ms)
            ax.plot(px, py, color=OKABE_ITO[0], linewidth=1.4, label="p50 per window")
            px, py = _opt_xy(mids, mw.p99_ms)
            ax.plot(px, py, color=OKABE_ITO[5], linewidth=1.4, label="p99 per window")
            if key == e.TTFT_MS:
                _slo_line(ax, slo_ttft_ms, vertical=False)
            if wide_range(ys, ratio=100.0):
                ax.set_yscale("log")
            ax.set_ylabel(label)
        axes[0].legend(loc="upper left", ncols=4)
        load = axes[3]
        edges = [*w.start_s, (w.start_s[-1] if w.start_s else 0.0) + w.window_s]
        load.stairs(w.offered_per_s, edges, color=OKABE_ITO[1], label="offered", linewidth=1.4)
        load.stairs(w.completed_per_s, edges, color=OKABE_ITO[2], label="completed (ok)")
        load.set_ylabel("requests/s")
        load.set_xlabel("time since the first due request (s)")
        twin = load.twinx()
        twin.stairs(
            w.in_flight_max,
            edges,
            color=OKABE_ITO[3],
            linestyle="--",
            label="in flight (max)",
        )
        twin.set_ylabel("in flight (requests)")
        twin.grid(visible=False)
        twin.spines["right"].set_visible(True)
        h1, l1 = load.get_legend_handles_labels()
        h2, l2 = twin.get_legend_handles_labels()
        load.legend(h1 + h2, l1 + l2, loc="upper left", ncols=3)

    sampled = "every request" if sm.every == 1 else f"every {sm.every}th request"
    caption = (
        f"Dots: {sampled} of {sm.total:,} by send time (ok requests); lines: p50 and p99 of "
        f"the requests sent in each {w.window_s:g} s window. Bottom: requests due per second "
        "(offered load), ok completions per second, and the most requests in flight in each "
        "window (right axis)."
    )
    return render(_id(prefix, "latency-time"), "Latency over time", caption, draw, height_in=8.5)


def itl_chart(series: RunSeries, *, prefix: str = "") -> Chart:
    """The token-weighted ITL histogram on log-spaced bins, one outline per class."""
    hists = [h for h in series.itl if h.workload == e.ALL or len(series.classes) > 1]

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        drawn = False
        for i, h in enumerate(hists):
            total = sum(h.weights)
            if not total:
                continue
            shares = [100 * wt / total for wt in h.weights]
            ax.stairs(
                shares,
                h.edges_ms,
                color=series_colour(i),
                fill=i == 0,
                alpha=0.35 if i == 0 else 1.0,
                label=f"{_class_label(h.workload)} ({total:,} tokens)",
            )
            if i == 0:
                ax.stairs(shares, h.edges_ms, color=series_colour(i))
            drawn = True
        if not drawn:
            no_data(ax)
            return
        ax.set_xscale("log")
        ax.set_xlabel("inter-token latency (ms, log scale)")
        ax.set_ylabel("share of tokens (%)")
        ax.legend(loc="upper right")

    caption = (
        "Inter-token latency: each chunk's gap after the previous one divided by its tokens, "
        "counted once per token (ok requests), on log-spaced bins; gaps of 0 (chunks read "
        "together) fall in the first bin."
    )
    return render(_id(prefix, "itl"), "ITL distribution", caption, draw, height_in=3.6)


def throughput_chart(a: Analysis, *, prefix: str = "") -> Chart:
    """Output and total tokens per second per window, with completions per second (for a
    run of embeddings only: input tokens per second, with completions)."""
    ws = a.windows
    embeddings = a.overall.embeddings_only

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        if not ws:
            no_data(ax)
            return
        edges = [*(x.start_s for x in ws), ws[-1].end_s]
        if not embeddings:  # embeddings stream no output token: no flat zero line
            ax.stairs(
                [x.output_tokens_per_s for x in ws],
                edges,
                color=OKABE_ITO[0],
                label="output tokens/s",
            )
        ax.stairs(
            [x.total_tokens_per_s for x in ws],
            edges,
            color=OKABE_ITO[1],
            label="input tokens/s (embeddings)" if embeddings else "total tokens/s (with prompts)",
        )
        ax.set_ylabel("tokens/s")
        ax.set_xlabel("time since the first due request (s)")
        twin = ax.twinx()
        twin.stairs(
            [x.requests_per_s for x in ws],
            edges,
            color=OKABE_ITO[2],
            linestyle="--",
            label="completed requests/s",
        )
        twin.set_ylabel("requests/s")
        twin.grid(visible=False)
        twin.spines["right"].set_visible(True)
        h1, l1 = ax.get_legend_handles_labels()
        h2, l2 = twin.get_legend_handles_labels()
        fig.legend(h1 + h2, l1 + l2, loc="outside upper center", ncols=3)

    caption = (
        f"Per {a.window_s:g} s window: content tokens received, the same plus the prompt "
        "tokens of requests whose first token arrived in it, and ok completions (right axis)."
    )
    return render(_id(prefix, "throughput"), "Throughput over time", caption, draw, height_in=3.6)


def fidelity_chart(series: RunSeries, *, prefix: str = "") -> Chart:
    """Requested (trace) against reported (server usage) prompt tokens per request."""
    f = series.fidelity

    def draw(fig: Figure) -> None:
        ax = fig.subplots()
        if not f.total:
            no_data(ax, "no request reported usage")
            return
        classes = sorted(set(f.workload))
        for i, c in enumerate(classes):
            xs = [r for r, w in zip(f.requested, f.workload, strict=True) if w == c]
            ys = [r for r, w in zip(f.reported, f.workload, strict=True) if w == c]
            ax.scatter(xs, ys, s=8, alpha=0.6, linewidths=0, color=series_colour(i), label=c)
        lo = min(min(f.requested), min(f.reported))
        hi = max(max(f.requested), max(f.reported))
        ax.plot(
            [lo, hi], [lo, hi], color=MUTED_SENTINEL, linestyle="--", label="reported = requested"
        )
        if wide_range([float(v) for v in (*f.requested, *f.reported)]):
            ax.set_xscale("log")
            ax.set_yscale("log")
        ax.set_xlabel("requested prompt tokens (trace)")
        ax.set_ylabel("reported prompt tokens (usage)")
        ax.legend(loc="upper left")

    shown = len(f.requested)
    caption = (
        f"Prompt tokens the trace asked for against those the server counted, {shown:,} of "
        f"{f.total:,} requests with usage; points on the dashed line were faithful."
    )
    return render(_id(prefix, "fidelity"), "Prompt fidelity", caption, draw, height_in=3.8)
