"""Charts of comparisons and sweeps: overlaid CDFs of several runs, per-metric and
per-TTFT-component differences with their bootstrap intervals, and latency and goodput
against offered load with the knee and the crossover marked.

The numbers come from ``analyzers.compare.runs.Comparison``, ``analyzers.compare.sweep`` /
``analyzers.compare.crossover`` and
``analyzers.timeseries.RunSeries``; every axis names its unit. Must not import loadgen.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Final

from analyzers import exprs as e
from analyzers.compare.crossover import SweepComparison
from analyzers.compare.runs import Comparison
from analyzers.compare.sweep import SweepAnalysis
from analyzers.timeseries import RunSeries
from reports.charts.figure import Chart, no_data, render, wide_range
from reports.theme import MUTED_SENTINEL, OKABE_ITO, SLO_COLOUR, series_colour

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

_CDF_PANELS: Final = (
    (e.TTFT_FROM_DUE_MS, "TTFT from due (ms)"),
    (e.TPOT_MS, "TPOT (ms/token)"),
    (e.E2E_MS, "E2E (ms)"),
)
_LINESTYLES: Final = ("-", "--", "-.", ":")


def overlaid_cdf_chart(
    labels: Sequence[str], series: Sequence[RunSeries], slo_ttft_ms: float | None
) -> Chart:
    """The CDFs of TTFT, TPOT and E2E of every run (all requests), one colour per run."""

    def draw(fig: Figure) -> None:
        axes = fig.subplots(1, len(_CDF_PANELS))
        for ax, (metric, unit) in zip(axes, _CDF_PANELS, strict=True):
            values: list[float] = []
            for i, (label, sr) in enumerate(zip(labels, series, strict=True)):
                c = sr.cdf(e.ALL, metric)
                if not c.count:
                    continue
                values += c.values_ms
                ax.step(
                    c.values_ms,
                    c.fractions,
                    where="post",
                    color=series_colour(i),
                    linestyle=_LINESTYLES[i % len(_LINESTYLES)],
                    label=f"{label} (n={c.count:,})",
                )
            if not values:
                no_data(ax)
                continue
            if metric == e.TTFT_FROM_DUE_MS and slo_ttft_ms is not None:
                ax.axvline(slo_ttft_ms, color=SLO_COLOUR, linestyle=(0, (6, 3)), label="SLO")
            if wide_range(values):
                ax.set_xscale("log")
            ax.set_xlabel(unit)
            ax.set_ylabel("fraction of ok requests")
            ax.set_ylim(0, 1.02)
        axes[0].legend(loc="lower right")

    caption = (
        "Each run's distribution over all its ok requests; the first run is the base. "
        "Colours and dash patterns both tell the runs apart."
    )
    return render("compare-cdf", "Distributions, run against run", caption, draw, height_in=3.6)


def _interval_panel(
    ax: Axes, rows: Sequence[tuple[str, float, float, float, bool]], unit: str
) -> None:
    """Horizontal intervals: (label, estimate, low, high, significant) per row."""
    if not rows:
        no_data(ax)
        return
    ys = list(range(len(rows)))[::-1]
    for y, (_, est, lo, hi, sig) in zip(ys, rows, strict=True):
        colour = OKABE_ITO[5] if sig and est > 0 else OKABE_ITO[0] if sig else MUTED_SENTINEL
        ax.errorbar(
            [est],
            [y],
            xerr=[[est - lo], [hi - est]],
            fmt="o",
            color=colour,
            capsize=3,
            markersize=5,
        )
    ax.axvline(0, color=MUTED_SENTINEL, linewidth=1)
    ax.set_yticks(ys, [r[0] for r in rows])
    ax.set_xlabel(unit)
    ax.grid(axis="y", visible=False)


def deltas_chart(c: Comparison) -> Chart:
    """Per run against the base: the relative difference of each metric percentile, and
    the absolute difference of each TTFT component, with their intervals."""
    metric_rows = [
        (
            f"{d.label}: {d.name} p{d.percentile:g}" if d.percentile is not None else d.name,
            100 * d.difference.relative.estimate,
            100 * d.difference.relative.low,
            100 * d.difference.relative.high,
            d.difference.significant,
        )
        for d in c.metrics
        if d.workload == e.ALL and d.difference.relative is not None
    ]
    component_rows = [
        (
            f"{d.label}: {d.term} p{d.percentile:g}",
            d.difference.absolute.estimate,
            d.difference.absolute.low,
            d.difference.absolute.high,
            d.difference.significant,
        )
        for d in c.components
        if d.workload == e.ALL
    ]
    height = max(3.0, 0.24 * max(len(metric_rows), len(component_rows)) + 1.2)

    def draw(fig: Figure) -> None:
        left, right = fig.subplots(1, 2)
        _interval_panel(left, metric_rows, "difference against the base (%)")
        left.set_title("Metrics")
        _interval_panel(right, component_rows, "difference against the base (ms)")
        right.set_title("TTFT components")

    confidence = c.options.confidence
    caption = (
        f"Each run minus the base ({c.labels[0]}), all requests: dots are the difference of "
        f"the percentile, bars its {confidence:.0%} bootstrap interval. Vermillion: "
        "significantly higher (worse for latency); blue: significantly lower; grey: the "
        "interval includes 0. TTFT components appear where the servers report their timings."
    )
    return render("compare-deltas", "Differences with intervals", caption, draw, height_in=height)


def _knee(ax: Axes, sweep: SweepAnalysis, colour: str) -> None:
    if sweep.knee is not None:
        ax.axvline(
            sweep.knee.offered,
            color=colour,
            linestyle=":",
            linewidth=1.6,
            label=f"knee {sweep.label}: {sweep.knee.offered:g} {sweep.load_unit}",
        )


def _line(
    ax: Axes,
    xs: Sequence[float],
    colour: str,
    style: str,
    ys: Sequence[float | None],
    label: str,
    marker: str,
) -> None:
    pts = [(x, y) for x, y in zip(xs, ys, strict=True) if y is not None]
    if pts:
        ax.plot(
            [p[0] for p in pts],
            [p[1] for p in pts],
            color=colour,
            linestyle=style,
            marker=marker,
            label=label,
        )


def sweep_chart(
    sweeps: Sequence[SweepAnalysis],
    comparison: SweepComparison | None,
    slo_ttft_ms: float | None,
) -> Chart:
    """Per sweep: p50/p99 TTFT and p99 TPOT (left), goodput and error rate (right) against
    the offered load, the knee of each and the crossover of two."""
    unit = sweeps[0].load_unit if sweeps else "req/s"

    def draw(fig: Figure) -> None:
        lat, good = fig.subplots(1, 2)
        for i, sw in enumerate(sweeps):
            colour = series_colour(i)
            xs = [st.offered for st in sw.steps]
            style = _LINESTYLES[i % len(_LINESTYLES)]

            _line(
                lat,
                xs,
                colour,
                style,
                [st.ttft_p99_ms for st in sw.steps],
                f"{sw.label} TTFT p99",
                "o",
            )
            _line(
                lat,
                xs,
                colour,
                style,
                [st.ttft_p50_ms for st in sw.steps],
                f"{sw.label} TTFT p50",
                ".",
            )
            _line(
                lat,
                xs,
                colour,
                style,
                [st.tpot_p99_ms for st in sw.steps],
                f"{sw.label} TPOT p99",
                "s",
            )
            gp = [st.goodput for st in sw.steps]
            if any(g is not None for g in gp):
                _line(
                    good,
                    xs,
                    colour,
                    style,
                    [None if g is None else 100 * g for g in gp],
                    f"{sw.label} goodput",
                    "o",
                )
            _line(
                good,
                xs,
                colour,
                style,
                [100 * st.error_rate for st in sw.steps],
                f"{sw.label} errors",
                "x",
            )
            _knee(lat, sw, colour)
            _knee(good, sw, colour)
        if slo_ttft_ms is not None:
            lat.axhline(slo_ttft_ms, color=SLO_COLOUR, linestyle=(0, (6, 3)), label="TTFT SLO")
        if comparison is not None and comparison.crossover is not None:
            x = comparison.crossover.load
            for ax in (lat, good):
                ax.axvline(x, color=SLO_COLOUR, linewidth=2.0, alpha=0.6)
            good.annotate(
                f"crossover {x:.3g} {unit}",
                xy=(x, 50),
                xytext=(6, 0),
                textcoords="offset points",
                color=SLO_COLOUR,
            )
        values = [
            v for sw in sweeps for st in sw.steps for v in (st.ttft_p99_ms, st.tpot_p99_ms) if v
        ]
        if wide_range(values):
            lat.set_yscale("log")
        lat.set_xlabel(f"offered load ({unit})")
        lat.set_ylabel("latency (ms; TPOT in ms/token)")
        lat.set_title("Latency")
        lat.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=3, fontsize=8)
        good.set_xlabel(f"offered load ({unit})")
        good.set_ylabel("share of requests (%)")
        good.set_ylim(-2, 102)
        good.set_title("Goodput and errors")
        good.legend(loc="upper center", bbox_to_anchor=(0.5, -0.16), ncols=3, fontsize=8)

    caption = (
        "Each sweep step's latency percentiles and goodput (requests ok within their SLOs) "
        "against the load it offered. Dotted verticals: the knee, the highest load that "
        "still meets the SLOs."
    )
    if comparison is not None and comparison.crossover is not None:
        caption += f" Solid vertical: the crossover ({comparison.crossover.description})."
    elif comparison is not None and comparison.verdict.withheld:
        caption += f" No crossover drawn: {comparison.verdict.text}."
    return render("sweep", "Load sweep", caption, draw, height_in=5.2)
