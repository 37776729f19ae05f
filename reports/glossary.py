"""What each line of the end-of-run summary means, in a line each, for a first run (the
demo) and for anyone who asks. The full definitions are in docs/analysis.md ("Per-request
metrics", "Throughput", "Run validity"); this is their one-line form, kept beside the
metric names so that a new metric without a line fails a test."""

from __future__ import annotations

from typing import Final

METRIC_MEANINGS: Final[dict[str, str]] = {
    "TTFT": "request's first byte written -> first content token",
    "TTFT from due": "from when the trace wanted it sent: what a user waits, lateness too",
    "Time to first byte": "request written -> first response bytes (a role-only chunk counts)",
    "Time to first reasoning": "request written -> first reasoning token (reasoning models)",
    "TPOT": "time per output token after the first, per request",
    "ITL": "gap between tokens as they arrived, one sample per token",
    "E2E": "request written -> response ended",
    "Schedule lag": "sent - due, the client's lateness (p99 over 5 ms: it limited the run)",
}
"""One line per metric name of ``analyzers.analysis.METRICS``."""

OTHER_MEANINGS: Final[tuple[tuple[str, str], ...]] = (
    ("requests", "rows by outcome; errors are every outcome but ok"),
    ("throughput", "completed requests and tokens per second over the run"),
    ("prompt fidelity", "prompt tokens asked for vs what the server counted"),
    ("generator", "the client's own health: schedule and event-loop lag, stamp delay, CPU"),
    ("warning", "a reason a figure may not be the server's: read it before the numbers"),
)

DOC: Final = "docs/analysis.md, sections Per-request metrics and Run validity"


def glossary_lines() -> list[str]:
    """The summary's lines explained, one each (at most 100 characters), under a heading
    naming the full document."""
    width = max(len(name) for name in (*METRIC_MEANINGS, *(n for n, _ in OTHER_MEANINGS)))
    lines = [f"what the lines mean (in full: {DOC}):"]
    lines += [f"  {name:<{width}}  {text}" for name, text in METRIC_MEANINGS.items()]
    lines += [f"  {name:<{width}}  {text}" for name, text in OTHER_MEANINGS]
    return lines
