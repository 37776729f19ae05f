"""A replay run start to finish: options, session, shards and workers, the recorder,
``run.json``, Prometheus scraping, the endpoint probe and sweeps.

The top of the replay path: imports the rest of ``loadgen`` (never ``loadgen.sim`` or
``loadgen.cli``) and ``traces``; never Polars, matplotlib, rich, click or the analyzers.
Ray and uvloop are optional and imported where used.
"""

__all__ = [
    "deployment",
    "descriptors",
    "dryrun",
    "health",
    "options",
    "probe",
    "ray",
    "recorder",
    "recover",
    "runinfo",
    "runlock",
    "scrape",
    "session",
    "shard",
    "sharding",
    "sweep",
    "workers",
]
