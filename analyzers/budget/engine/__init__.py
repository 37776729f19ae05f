"""The engine's scheduler in model time: KV blocks, one step's time, the iteration-level
scheduler and the virtual-time timeline.

A leaf shared by the simulator, the offline what-ifs and the decomposition: it imports
the budget arithmetic and nothing of pyarrow, polars or the planning report.
"""
