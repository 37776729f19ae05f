"""The live progress display of a replay (rich), fed by ``LiveStats`` snapshots.

CLI layer only: the replay engine itself never prints.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn, TimeElapsedColumn

from loadgen.live import LiveSnapshot, StatsView


def describe(snap: LiveSnapshot) -> str:
    """One status line: counts, live TTFT percentiles, tokens."""
    ttft = (
        f"TTFT p50 {snap.ttft_p50_ms:.1f} ms p99 {snap.ttft_p99_ms:.1f} ms"
        if snap.ttft_p50_ms is not None and snap.ttft_p99_ms is not None
        else "TTFT -"
    )
    return (
        f"sent {snap.dispatched} done {snap.done} errors {snap.errors} "
        f"in flight {snap.in_flight} | {ttft} | {snap.output_tokens:,} tokens"
    )


class ProgressFeed:
    """Connects a session's live statistics to the display once the session has them."""

    def __init__(self, progress: Progress | None, task_id: TaskID | None) -> None:
        self._progress = progress
        self._task_id = task_id
        self._stats: StatsView | None = None
        self._total = 0

    def attach(self, stats: StatsView, total: int) -> None:
        self._stats = stats
        self._total = total

    def refresh(self) -> None:
        if self._progress is None or self._task_id is None:
            return
        if self._stats is not None:
            snap = self._stats.snapshot()
            self._progress.update(
                self._task_id,
                total=self._total,
                completed=snap.done,
                description=describe(snap),
                count=f"{snap.done}/{self._total}",
            )
        self._progress.refresh()


@asynccontextmanager
async def live_progress(console: Console, enabled: bool = True) -> AsyncIterator[ProgressFeed]:
    """Show a progress bar, refreshed four times a second, while the body runs."""
    if not enabled:
        yield ProgressFeed(None, None)
        return
    progress = Progress(
        TextColumn("[bold]replay"),
        BarColumn(),
        # Blank until the session knows its total (the probe and prompts come first): never
        # "0/None".
        TextColumn("{task.fields[count]}"),
        TimeElapsedColumn(),
        TextColumn("{task.description}"),
        console=console,
        auto_refresh=False,
    )
    feed = ProgressFeed(
        progress, progress.add_task("probing the endpoint, building prompts", total=None, count="")
    )

    async def refresh_forever() -> None:
        while True:
            feed.refresh()
            await asyncio.sleep(0.25)

    with progress:
        async with asyncio.TaskGroup() as tg:
            refresher = tg.create_task(refresh_forever())
            try:
                yield feed
            finally:
                refresher.cancel()
        feed.refresh()
