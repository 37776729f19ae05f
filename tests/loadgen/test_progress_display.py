"""What a replay shows: the live progress line (no ``0/None`` before the session knows its
total, the counts once it does) and the summary table at full width outside a terminal."""

from __future__ import annotations

import asyncio
import io

import pytest
from rich.console import Console
from rich.table import Table

from loadgen.cli.echo import cli_console
from loadgen.cli.progress import live_progress
from loadgen.live import LiveSnapshot

pytestmark = pytest.mark.serial


class _Stats:
    def snapshot(self) -> LiveSnapshot:
        return LiveSnapshot(
            dispatched=7, done=5, ok=5, errors=0, in_flight=2, ttft_p50_ms=20.0,
            ttft_p99_ms=30.0, output_tokens=900, elapsed_s=1.0,
        )  # fmt: skip


def _render(attach: bool) -> str:
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=200)

    async def main() -> None:
        async with live_progress(console) as feed:
            if attach:
                feed.attach(_Stats(), 40)
            feed.refresh()

    asyncio.run(main())
    return out.getvalue()


def test_before_the_total_is_known_no_none_is_shown() -> None:
    text = _render(attach=False)
    assert "None" not in text
    assert "probing the endpoint" in text


def test_once_attached_the_counts_show() -> None:
    text = _render(attach=True)
    assert "5/40" in text
    assert "None" not in text


def test_tables_outside_a_terminal_are_not_cut_at_80_columns(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A CI log is not a terminal: rich would lay tables out in 80 columns and cut them."""
    monkeypatch.delenv("COLUMNS", raising=False)
    headers = [f"column-number-{k:02d}" for k in range(8)]  # ~140 columns wide
    table = Table(*headers)
    table.add_row(*(f"value-{k}" for k in range(8)))
    for wide in (False, True):
        out = io.StringIO()
        console = cli_console(file=out) if wide else Console(file=out)
        assert not console.is_terminal
        console.print(table)
        assert all(h in out.getvalue() for h in headers) is wide, out.getvalue()
