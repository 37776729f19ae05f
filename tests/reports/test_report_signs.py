"""The report's signs, units and wording: no negative duration, a slowdown is never "x 0.25",
and the console, Markdown, JSON and HTML print the same verdict."""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
from click.testing import CliRunner
from runbuilders import make_run, make_sweep

from analyzers.compare.crossover import compare_sweeps
from analyzers.compare.sweep import SweepOptions
from analyzers.decompose import DecomposeOptions, decompose
from analyzers.decompose.columns import NETWORK_UNIDENTIFIED, OVERSHOOT_MS, TERMS
from analyzers.decompose.terms import request_terms
from analyzers.goodput import SLOTargets
from analyzers.slo.parse import SLOSet
from loadgen.cli.root import cli
from reports.html.report import time_scale_note, write_report
from reports.html.run import ReportOptions
from traces import schema as s

_SERVER = (s.SERVER_QUEUE_MS, s.SERVER_PREFILL_MS, s.SERVER_FIRST_TOKEN_MS, s.SERVER_TTFT_MS)
_NEGATIVE_CELL = re.compile(r'<td class="n">-\d')


def _on_model_clock(run: Path, factor: float = 4.0) -> Path:
    """Multiply the server's timings by ``factor``: what a simulator at time scale
    1/``factor`` reports (its own clock) against the client's wall clock."""
    file = run / "requests.parquet"
    frame = pl.read_parquet(file)
    frame = frame.with_columns(*(pl.col(c) * factor for c in _SERVER))
    pq.write_table(frame.to_arrow(), file)
    return run


def test_a_negative_network_is_unidentified_not_negative(tmp_path: Path) -> None:
    run = _on_model_clock(make_run(tmp_path / "run", n=150, seed=3))
    terms = request_terms(run, None, DecomposeOptions())
    frame = terms.frame
    # Unidentified: null, neither 0 nor negative, and the request is marked.
    assert frame.get_column("network_ms").null_count() == frame.height
    assert frame.get_column(NETWORK_UNIDENTIFIED).all()
    # The identified parts still add up: the excess is kept (<= 0) as the overshoot.
    parts = frame.select(
        pl.sum_horizontal([pl.col(f"{t}_ms").fill_null(0.0) for t in TERMS])
        + pl.col(OVERSHOOT_MS)
        - pl.col("ttft_from_due_ms")
    ).to_series()
    assert parts.abs().max() < 1e-6  # type: ignore[operator]
    d = decompose(run, None, DecomposeOptions(percentiles=(50.0, 99.0)))
    assert any(v.startswith("network unidentifiable in 150 of 150 requests") for v in d.verdicts)
    for tail in d.overall.tails:
        for stat in tail.terms:
            assert stat.tail_mean_ms is None or stat.tail_mean_ms >= 0, stat
    # With the time scale applied, the network is identified again (0.5 ms x 4).
    scaled = request_terms(run, None, DecomposeOptions(time_scale=0.25)).frame
    assert not scaled.get_column(NETWORK_UNIDENTIFIED).any()
    assert abs(scaled.get_column("network_ms").median() - 2.0) < 0.01  # type: ignore[operator]


def test_report_of_a_skewed_run_shows_no_negative_duration(tmp_path: Path) -> None:
    run = _on_model_clock(make_run(tmp_path / "run", n=150, seed=3))
    html = write_report(tmp_path / "r.html", runs=[run], markdown=tmp_path / "r.md")
    page = html.read_text()
    assert not _NEGATIVE_CELL.findall(page)
    assert "network unidentifiable" in page
    md = (tmp_path / "r.md").read_text()
    assert not re.findall(r"\| -\d", md)


def test_a_time_scale_is_worded_as_the_slowdown_it_is(tmp_path: Path) -> None:
    note = time_scale_note(0.25)
    assert "client latencies x4 " in note
    assert "x0." not in note
    assert "x 0." not in note
    a = make_run(tmp_path / "a", n=150, seed=1)
    b = make_run(tmp_path / "b", n=150, seed=2, slow=1.3)
    page = write_report(
        tmp_path / "c.html", runs=[a, b], options=ReportOptions(time_scale=0.25)
    ).read_text()
    assert "client latencies x4 " in page
    assert not re.findall(r"x ?0\.\d", page)


def test_console_markdown_json_and_html_say_the_same_verdict(tmp_path: Path) -> None:
    mono = make_sweep(tmp_path / "mono", {1.0: 1.0, 2.0: 1.0, 4.0: 1.45, 8.0: 2.0})
    lag = make_sweep(tmp_path / "lag", {1.0: 1.0, 2.0: 1.0, 4.0: 1.0, 8.0: 1.2}, {4.0: 20.0})
    slo = tmp_path / "slo.toml"
    slo.write_text("[goodput]\ntpot_ms = 15\n")
    verdict = compare_sweeps(
        mono, lag, SweepOptions(slos=SLOSet(goodput=SLOTargets(tpot_ms=15.0)))
    ).verdict
    assert verdict.withheld
    runner = CliRunner()
    md = tmp_path / "c.md"
    out = runner.invoke(
        cli,
        ["compare", str(mono), str(lag), "--slo", str(slo), "--markdown", str(md)],
        env={"COLUMNS": "200"},  # wide enough for every table cell
    )
    assert out.exit_code == 0, out.output
    assert f"• {verdict.text}" in out.output.splitlines()
    assert verdict.text in md.read_text()
    js = runner.invoke(cli, ["compare", str(mono), str(lag), "--slo", str(slo), "--json"])
    assert js.exit_code == 0, js.output
    assert json.loads(js.output)["verdict"]["text"] == verdict.text
    assert json.loads(js.output)["verdict"]["withheld_reason"] == verdict.withheld_reason
    page, summary = tmp_path / "s.html", tmp_path / "s.md"
    rep = runner.invoke(
        cli,
        ["report", "--sweep", str(mono), "--sweep", str(lag), "--slo", str(slo),
         "-o", str(page), "--markdown", str(summary)],
    )  # fmt: skip
    assert rep.exit_code == 0, rep.output
    assert verdict.text in rep.output.splitlines()
    html = page.read_text()
    assert escape(verdict.text) in html
    assert verdict.text in summary.read_text()
    # Each step's SLO word is the same on the console and in the page.
    console_words = re.findall(r"│\s*(meets|breaks)\s*│", out.output)
    html_words = re.findall(r'<td class="n">(meets|breaks)</td>', html)
    assert console_words
    assert console_words == html_words
