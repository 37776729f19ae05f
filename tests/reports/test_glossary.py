"""The summary's glossary: every metric the table can show has its line, and the demo and
the replay print it (the demo whole, the replay as a pointer to the document)."""

from __future__ import annotations

from rich.console import Console

from analyzers.analysis import METRICS
from reports.glossary import DOC, METRIC_MEANINGS, glossary_lines


def test_every_metric_of_the_summary_table_has_a_line() -> None:
    assert {m.name for m in METRICS} == set(METRIC_MEANINGS)


def test_the_glossary_names_its_document_and_fits_a_terminal() -> None:
    lines = glossary_lines()
    assert DOC in lines[0]
    assert all(len(line) <= 100 for line in lines), max(lines, key=len)
    assert any(line.strip().startswith("TTFT from due") for line in lines)
    assert any(line.strip().startswith("Schedule lag") for line in lines)


def test_the_glossary_renders_as_written() -> None:
    """Rich must not take the parentheses or numbers as markup or highlight them away."""
    console = Console(width=200, record=True, color_system=None)
    for line in glossary_lines():
        console.print(line, highlight=False)
    assert console.export_text().splitlines() == glossary_lines()
