"""The offline simulator: the HTTP simulator's engine in virtual time, for ``loadgen simulate``.

``engine`` steps a trace through the simulator's scheduler and physics without HTTP,
sockets or sleeping, one ``RequestRecord`` per request; ``rundir`` writes those rows as a
run directory in the replay's schema, marked as simulated; ``sweep`` writes several loads
as a sweep directory. Like the rest of ``loadgen.sim``, nothing here imports the replay
client.
"""

__all__ = ["engine", "rundir", "sweep"]
