"""The cached share is printed token-weighted, with a table per session turn depth."""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

from analyzers.metrics import analyze
from reports.html.run import analysis_tables
from reports.jsondoc import analysis_json
from reports.tables import analysis_renderables
from tests.analyzers.test_metrics import rec, write_run


def test_console_html_and_json_show_the_token_weighted_share(tmp_path: Path) -> None:
    records = [
        rec(0, session_id="a", prompt_tokens=10, cached_tokens=10),
        rec(1, session_id="a", prompt_tokens=990, cached_tokens=0),
    ]
    a = analyze(write_run(tmp_path / "run", records))
    console = Console(width=200, record=True)
    for r in analysis_renderables(a):
        console.print(r)
    text = console.export_text()
    assert "1.0% of prompt tokens" in text  # 10 / 1,000, not the 50% mean of fractions
    assert "Prefix cache by turn depth" in text
    assert "100.0%" in text
    assert "0.0%" in text
    html = analysis_tables(a)
    assert "Prefix cache by turn depth" in html
    assert "1.0%" in html
    doc = analysis_json(a)
    assert doc["overall"]["prompt_fidelity"]["cached_share"] == 0.01
    assert [d["turn"] for d in doc["cache_by_turn"]] == [1, 2]
