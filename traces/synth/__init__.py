"""Seeded synthetic workload traces: arrivals, lengths, request classes, sessions,
agent sessions.

Part of ``traces``: pyarrow and the standard library only, nothing else of ours.
"""

__all__ = [
    "agents",
    "arrivals",
    "classes",
    "lengths",
    "sessions",
    "trace",
]
