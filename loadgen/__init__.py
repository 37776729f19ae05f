"""Produces runs: replays a workload trace against an OpenAI-compatible endpoint.

The replay path (everything here but ``sim``, ``engines`` and ``cli``) imports ``traces``
only: never ``analyzers``, ``reports``, Polars, matplotlib, rich or click. ``loadgen.sim``,
a peer of the replay engine, may also use ``analyzers.budget`` and nothing of the client;
``loadgen.engines`` starts real engines (vLLM on the CPU) by the simulator's launch
protocol; ``loadgen.cli`` is the composition root and the only importer of click.
"""

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "cli",
    "client",
    "clock",
    "collector",
    "deferred",
    "dispatched",
    "engines",
    "errors",
    "fit",
    "history",
    "http",
    "inflight",
    "live",
    "lookahead",
    "openai",
    "pacer",
    "parentdeath",
    "prepare",
    "redact",
    "replay",
    "result",
    "rows",
    "run",
    "schedule",
    "sessions",
    "shape",
    "sim",
    "stalls",
    "stampdelay",
    "stream",
    "turns",
    "wakeup",
]
