"""The HTML and Markdown reports of synthetic runs: self-contained, complete, bounded."""

from __future__ import annotations

import re
import time
from pathlib import Path

from analyzers.timeseries import SeriesOptions, cdf_indices, run_series
from reports.html.report import CSP, build_report, render_html, write_report
from reports.html.run import ReportOptions, safe_url

from .conftest import write_synthetic_run

# A load is an attribute or CSS reference that makes a browser fetch something.
LOADS = re.compile(
    r"""(?:\b(?:src|href|srcset|action|poster|data|formaction)\s*=\s*["']?\s*(?:https?:)?//)"""
    r"""|(?:url\(\s*["']?\s*(?:https?:)?//)|(?:@import)|(?:<script)|(?:<link\b)""",
    re.IGNORECASE,
)


def external_loads(html: str) -> list[str]:
    """Every http(s) or protocol-relative load in a page, and any script or link tag."""
    return LOADS.findall(html)


def test_single_run_report_is_self_contained(small_run: Path, tmp_path: Path) -> None:
    out = write_report(
        tmp_path / "r.html",
        runs=[small_run],
        options=ReportOptions(slo_ttft_ms=30.0),
        markdown=tmp_path / "r.md",
    )
    html = out.read_text()
    assert external_loads(html) == []
    assert f'content="{CSP}"' in html
    # The endpoint is shown without its credentials.
    assert "secret" not in html
    assert "key=abc" not in html
    assert "http://127.0.0.1:8000/v1" in html
    for heading in ("What was run", "Verdicts", "Tables", "Charts"):
        assert f"<h2>{heading}</h2>" in html
    # Header, then verdicts, then tables, then charts.
    order = [html.index(f"<h2>{h}</h2>") for h in ("What was run", "Verdicts", "Tables", "Charts")]
    assert order == sorted(order)
    assert "SLO gate: FAIL" in html or "SLO gate: PASS" in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids)), "element ids must be unique across the inline SVGs"
    for chart in (
        "ttft-cdf",
        "ttft-decomposition",
        "latency-time",
        "itl",
        "throughput",
        "fidelity",
    ):
        assert f'<figure id="{chart}">' in html
    md = (tmp_path / "r.md").read_text()
    assert md.startswith("# Load test report")
    assert "| all |" in md
    assert "SLO gate" in md


UNIT = re.compile(r"\((?:[^)]*\bms\b[^)]*|%|requests|ms/token)\)|/s\b|tokens \(|percentile")


def test_every_axis_has_a_unit(small_run: Path) -> None:
    report = build_report(runs=[small_run], options=ReportOptions(slo_ttft_ms=30.0))
    html = render_html(report)
    figures = re.findall(r"<figure.*?</figure>", html, re.S)
    assert len(figures) == 6
    for figure in figures:
        texts = [t.strip() for t in re.findall(r"<text\b[^>]*>([^<]*)</text>", figure)]
        # An x and a y axis label with a unit in every chart (twin axes add more).
        assert len([t for t in texts if UNIT.search(t)]) >= 2, (figure[:60], texts)


def test_comparison_report(small_run: Path, slower_run: Path, tmp_path: Path) -> None:
    md = tmp_path / "c.md"
    out = write_report(
        tmp_path / "c.html",
        runs=[small_run, slower_run],
        labels=["fast", "slow"],
        options=ReportOptions(slo_ttft_ms=30.0),
        markdown=md,
    )
    html = out.read_text()
    assert external_loads(html) == []
    assert "<h2>Comparison</h2>" in html
    assert '<figure id="compare-cdf">' in html
    assert '<figure id="compare-deltas">' in html
    assert '<figure id="slow-ttft-cdf">' in html
    ids = re.findall(r'\bid="([^"]+)"', html)
    assert len(ids) == len(set(ids))
    assert "## Comparison" in md.read_text()


def test_safe_url_drops_credentials() -> None:
    assert safe_url("https://u:p@h.example:8443/v1?api_key=x#f") == "https://h.example:8443/v1"


def test_cdf_grid_is_bounded_and_keeps_the_extremes() -> None:
    for n in (1, 2, 10, 1000, 10**6):
        idx = cdf_indices(n)
        assert idx[0] == 0
        assert idx[-1] == n - 1
        assert len(idx) <= 132


def test_series_are_exact_at_the_grid(small_run: Path) -> None:
    import polars as pl

    from analyzers import exprs as e
    from analyzers.frames import RowSelection, scan_run, select_rows
    from analyzers.goodput import SLOTargets
    from analyzers.metrics import request_frame

    series = run_series(small_run, SeriesOptions(max_points=100))
    cdf = series.cdf(e.ALL, e.TTFT_MS)
    values = (
        request_frame(select_rows(scan_run(small_run), RowSelection()), SLOTargets(), False)
        .select(pl.col(e.TTFT_MS).drop_nulls().sort())
        .collect()
        .to_series()
        .to_list()
    )
    assert cdf.count == len(values)
    assert cdf.values_ms[-1] == values[-1]
    assert cdf.values_ms[0] == values[0]
    assert all(0 < f <= 1 for f in cdf.fractions)
    assert len(series.samples.send_s) <= 100
    w = series.windows
    assert round(sum(n * w.window_s for n in w.offered_per_s)) == series.samples.total
    assert max(w.in_flight_max) >= 1
    assert w.in_flight_end[-1] == 0
    itl = next(h for h in series.itl if h.workload == e.ALL)
    assert len(itl.edges_ms) == len(itl.weights) + 1


def test_100k_request_run_stays_small(tmp_path: Path) -> None:
    run = write_synthetic_run(tmp_path / "big", requests=100_000, chunks=4)
    started = time.perf_counter()
    out = write_report(tmp_path / "big.html", runs=[run], options=ReportOptions(slo_ttft_ms=40))
    elapsed = time.perf_counter() - started
    size = out.stat().st_size
    assert size < 3_000_000, f"{size:,} bytes"
    assert external_loads(out.read_text()) == []
    assert elapsed < 30, f"{elapsed:.1f} s"
