"""Produces runs: replays a workload trace against an OpenAI-compatible endpoint.

The replay path imports ``traces`` only; ``loadgen.sim`` may also use ``analyzers.budget``.
"""

__version__ = "0.1.0"
