"""The engine's scheduler in model time: KV blocks, one step's time and its terms, the
iteration-level scheduler and the virtual-time timeline.

A leaf shared by the simulator, the offline what-ifs and the decomposition: it imports the
budget arithmetic it steps (``specs``, ``kv``, ``weights``) and the analyzers' errors, and
nothing third-party: no pyarrow, no Polars, nothing of ``traces`` or the planning report.
"""

__all__ = [
    "admission",
    "kvblocks",
    "scheduler",
    "step",
    "terms",
    "timeline",
]
