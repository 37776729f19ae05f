"""Service-level objectives: parse them, evaluate them against an analysis, gate a run.

Must not import ``loadgen``, ``reports`` or httpx; the exit codes are the errors' own.
"""

__all__ = [
    "evaluate",
    "gate",
    "parse",
]
