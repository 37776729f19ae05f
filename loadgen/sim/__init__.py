"""The built-in OpenAI-compatible engine simulator: the embedded default endpoint.

It serves ``/v1/completions`` and ``/v1/chat/completions`` (streaming and not) shaped like
vLLM's OpenAI server, times every chunk from one engine object (:mod:`loadgen.sim.engine`),
reports ground-truth per-request timings, injects seeded faults and records the write time of
every chunk for end-to-end tests. Start it with ``loadgen sim`` / ``python -m loadgen.cli.sim``,
or from Python with :func:`loadgen.sim.launch.start_sim`.

Its physics come from ``analyzers.budget`` (and its engine); besides, it imports ``traces``
and ``loadgen.errors``. Nothing here imports the replay client (``loadgen.client``,
``replay``, ``prepare``, ``http``, ``stream``, ``run``), httpx or Polars: the simulator is a
peer of the replay engine, never a user of it. Importing this package has no side effects
and imports no server machinery.
"""

__all__ = [
    "app",
    "chunks",
    "config",
    "context",
    "deadline",
    "engine",
    "faults",
    "instance",
    "launch",
    "metrics",
    "offline",
    "physics",
    "prefix",
    "prompt",
    "records",
    "request",
    "response",
    "responses",
    "router",
    "server",
    "tokenizer",
    "tokens",
    "topology",
]
