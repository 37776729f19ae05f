"""Rich tables for ``loadgen analyze`` and ``loadgen decompose``. Rendering only: every number
comes from ``analyzers.analysis.Analysis`` or ``analyzers.decompose.Decomposition``."""

from __future__ import annotations

from rich.console import RenderableType
from rich.table import Table
from rich.text import Text

from analyzers.analysis import Analysis, ClassSummary
from analyzers.decompose import TERMS, ClassDecomposition, Decomposition
from analyzers.validity import RunValidity
from reports import fmt
from reports.cache import basis_line, compared_line


def metrics_table(c: ClassSummary, title: str) -> Table:
    """One row per metric: count, mean, percentiles, max."""
    table = Table(title=title, title_justify="left")
    table.add_column("metric")
    table.add_column("n", justify="right")
    table.add_column("mean", justify="right")
    percentiles = c.metrics[0].percentiles if c.metrics else ()
    for pv in percentiles:
        table.add_column(f"p{pv.percentile:g}", justify="right")
    table.add_column("max", justify="right")
    for m in c.metrics:
        if m.count == 0:
            continue
        table.add_row(
            f"{m.name} ({m.unit})",
            str(m.count),
            fmt.number(m.mean),
            *(fmt.number(pv.value) for pv in m.percentiles),
            fmt.number(m.max),
        )
    return table


def class_lines(c: ClassSummary) -> list[str]:
    """Outcomes, throughput, prompt fidelity and goodput of one class."""
    outcomes = ", ".join(f"{o.outcome} {o.count}" for o in c.outcomes) or "none"
    lines = [
        f"requests {c.requests} ({outcomes}; errors {c.error_rate:.1%}) over {c.duration_s:.1f} s"
    ]
    if c.embeddings_only:
        lines.append(embeddings_line(c))
    else:
        lines.append(
            f"throughput {c.requests_per_s:.2f} req/s, {c.output_tokens_per_s:,.0f} output "
            f"tok/s, {c.total_tokens_per_s:,.0f} total tok/s ({c.output_tokens:,} output tokens)"
        )
        if c.embeddings:
            lines.append(f"of which {c.embeddings} embeddings requests: {embeddings_line(c)}")
    f = c.fidelity
    if f.requests:
        lines.append(
            f"prompt fidelity: requested {fmt.number(f.requested_tokens_mean)} vs reported "
            f"{fmt.number(f.reported_tokens_mean)} tokens (mean), median |ratio - 1| "
            f"{(f.abs_error_median or 0.0):.1%}; cached {fmt.number(f.cached_tokens_mean)} tokens "
            f"(mean), {fmt.percent(f.cached_share)} of prompt tokens"
        )
    t = c.tool_calls
    if t is not None:
        lines.append(
            f"tool calls: {t.calls} of {t.requests} replies ({t.share:.1%}), "
            f"{t.tokens:,} output tokens ({fmt.number(t.tokens_mean)} per call)"
        )
    g = c.goodput
    if g is not None:
        lines.append(
            f"goodput {g.fraction:.1%} ({g.good}/{g.requests}), {g.rate_per_s:.2f} req/s; "
            f"misses: TTFT {g.ttft_misses}, TPOT {g.tpot_misses}, failed {g.failed}"
        )
    return lines


def embeddings_line(c: ClassSummary) -> str:
    """Throughput of embeddings: requests, items and input tokens per second (no output
    tokens, no TTFT: the latency is E2E)."""
    ok = c.ok or 1
    return (
        f"throughput {c.requests_per_s:.2f} req/s, {c.items_per_s:,.1f} items/s, "
        f"{c.input_tokens_per_s:,.0f} input tok/s ({c.items:,} items, {c.items / ok:.1f} "
        "per request; latency is E2E)"
    )


def validity_lines(v: RunValidity) -> list[Text]:
    """``valid`` or one warning line per flag."""
    head = [Text("validity: ok", style="green")] if v.valid else []
    return head + [Text(f"warning: {reason}", style="yellow") for reason in v.reasons]


def analysis_renderables(a: Analysis) -> list[RenderableType]:
    """Everything ``loadgen analyze`` prints, in order."""
    out: list[RenderableType] = []
    for c in (a.overall, *a.classes):
        title = "Run" if c is a.overall else f"Workload {c.workload}"
        out.append(metrics_table(c, f"{title}: {a.run}" if c is a.overall else title))
        out.extend(class_lines(c))
        cache = compared_line(c)
        if cache is not None:
            out.append(cache)
    if a.windows and not a.overall.embeddings_only:
        rates = sorted(w.output_tokens_per_s for w in a.windows)
        out.append(
            f"output tok/s over {len(rates)} windows of {a.window_s:g} s: min {rates[0]:,.0f}, "
            f"median {rates[len(rates) // 2]:,.0f}, max {rates[-1]:,.0f}"
        )
    if a.cache_by_turn:
        out.append(cache_depth_table(a))
    if a.cache_basis is not None:
        out.append(basis_line(a.cache_basis))
    out.extend(validity_lines(a.validity))
    return out


def cache_depth_table(a: Analysis) -> Table:
    """Prefix-cache reuse per session turn depth, token-weighted: reported, and beside it
    what the trace's prefixes allow where the expectation was computed."""
    expected = any(d.expected is not None for d in a.cache_by_turn)
    table = Table(title="Prefix cache by turn depth (token-weighted)")
    names = ["turn", "requests", "prompt tokens", "cached tokens", "cached share"]
    if expected:
        names += ["expected tokens", "expected share", "reported / expected"]
    for name in names:
        table.add_column(name, justify="right")
    for d in a.cache_by_turn:
        cells = [
            str(d.turn),
            f"{d.requests:,}",
            f"{d.prompt_tokens:,}",
            f"{d.cached_tokens:,}",
            fmt.percent(d.share),
        ]
        if expected:
            x = d.expected
            cells += [
                f"{x.expected_tokens:,}" if x is not None else fmt.MISSING,
                fmt.percent(x.expected_share if x is not None else None),
                fmt.percent(x.fidelity if x is not None else None),
            ]
        table.add_row(*cells)
    return table


def _title(c: ClassDecomposition) -> str:
    return "Run" if c.workload == "all" else f"Workload {c.workload}"


def _percentile_table(c: ClassDecomposition, d: Decomposition) -> Table:
    """Each term's own percentiles (they do not add up: different requests)."""
    sources = {x.term: x.source for x in d.sources}
    table = Table(
        title=f"{_title(c)}: {c.requests} requests; each term's percentiles (ms)",
        title_justify="left",
    )
    table.add_column("term")
    table.add_column("source")
    for t in c.tails:
        table.add_column(f"p{t.percentile:g}", justify="right")
    for term in TERMS:
        table.add_row(
            term, sources.get(term, ""), *(fmt.number(t.term(term).percentile_ms) for t in c.tails)
        )
    table.add_row(
        Text("TTFT from due", style="bold"), "", *(fmt.number(t.ttft_ms) for t in c.tails)
    )
    return table


def _tail_table(c: ClassDecomposition) -> Table:
    """Mean composition of the requests at or beyond each percentile (adds up), vs budget."""
    table = Table(title=f"{_title(c)}: tail composition, mean ms (budget)", title_justify="left")
    table.add_column("term")
    for t in c.tails:
        table.add_column(f">= p{t.percentile:g}", justify="right")
    for term in TERMS:
        cells = []
        for t in c.tails:
            st = t.term(term)
            budget = f" ({fmt.number(st.budget_ms)})" if st.budget_ms is not None else ""
            cells.append(f"{fmt.number(st.tail_mean_ms)}{budget}")
        table.add_row(term, *cells)
    if any(t.overshoot_mean_ms for t in c.tails):
        # Kept <= 0 so the parts add up; shown as the positive amount taken off.
        table.add_row(
            "overshoot (subtracted)", *(fmt.number(abs(t.overshoot_mean_ms)) for t in c.tails)
        )
    table.add_row(
        Text("TTFT from due", style="bold"), *(fmt.number(t.tail_mean_ttft_ms) for t in c.tails)
    )
    table.add_row("requests", *(str(t.tail_requests) for t in c.tails))
    return table


def _network_line(d: Decomposition) -> str:
    """The run's network estimate, and whether the requests' own round trips replace it."""
    run_level = f"{fmt.number(d.network.value_ms)} ms ({d.network.source})"
    source = {x.term: x.source for x in d.sources}.get("network")
    if source in (None, "estimate"):
        return f"network round trip {run_level}"
    return f"network round trip: each request's own ({source}); the run's {run_level} where none"


def decomposition_renderables(d: Decomposition) -> list[RenderableType]:
    """Everything ``loadgen decompose`` prints, in order."""
    out: list[RenderableType] = [
        f"decomposition of {d.run}"
        + (f" against {d.budget_source}" if d.budget_source else "")
        + (" (server timings hidden)" if d.options.hide_server_timings else ""),
        _network_line(d),
    ]
    if d.prediction:
        out.append(f"server terms predicted by {d.prediction}")
    if d.chunking:
        out.append(d.chunking)
    cal = d.calibration
    if cal is not None:
        line = f"calibration on {cal.samples} low-load requests (<= {cal.max_in_flight} in flight)"
        if cal.b_us_per_token is not None:
            line += (
                f": prefill(n) = {fmt.number(cal.a_ms)} ms"
                f" + {fmt.number(cal.b_us_per_token)} µs x n"
                f" + {cal.c_ns_per_token2:.3g} ns x n²"
            )
        if cal.achieved_flops_per_s is not None and cal.fraction_of_peak is not None:
            line += (
                f"; achieved {cal.achieved_flops_per_s / 1e12:,.1f} TFLOP/s = "
                f"{cal.fraction_of_peak:.1%} of peak"
            )
        if cal.efficiency_from_load:
            line += " (fitted to the whole run's replay: the low-load requests had waited)"
        out.append(line)
    for c in (d.overall, *d.classes):
        out.append(_percentile_table(c, d))
        out.append(_tail_table(c))
    out.extend(Text(f"verdict: {v}", style="bold") for v in d.verdicts)
    out.extend(validity_lines(d.validity))
    return out
