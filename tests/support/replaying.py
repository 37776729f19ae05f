"""One replay of a trace against a server, as the CLI runs it but in-process, without the
signal handlers a test's process must keep (on the test path via pytest's
``pythonpath``; not a test module)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from loadgen.run.session import SessionOptions, SessionResult, run_session


def replay(trace: Path, run_dir: Path, base_url: str, **options: Any) -> SessionResult:
    """Replay ``trace`` against ``base_url`` into ``run_dir``; ``options`` are further
    ``SessionOptions`` fields."""
    opts = SessionOptions(trace_path=trace, run_dir=run_dir, base_url=base_url, **options)
    return asyncio.run(run_session(opts, install_signal_handlers=False))
