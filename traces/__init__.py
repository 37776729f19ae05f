"""On-disk truth of llm-loadgen: the workload (trace) table, the run table and the tools
that make, import, check and transform traces.

Depends on pyarrow (Pillow and tokenizers optionally, imported where used) and the standard
library; must not import ``loadgen``, ``analyzers`` or ``reports``, nor click, polars or
httpx. Importing the package alone loads nothing: ``SCHEMA_VERSION`` comes from
``traces.schema`` (and pyarrow) on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traces import (
        context,
        deployment,
        errors,
        health,
        importers,
        io,
        prompts,
        records,
        runconfig,
        runinfo,
        schema,
        stats,
        synth,
        transform,
        validate,
        values,
    )
    from traces.schema import SCHEMA_VERSION

__all__ = [
    "SCHEMA_VERSION",
    "context",
    "deployment",
    "errors",
    "health",
    "importers",
    "io",
    "prompts",
    "records",
    "runconfig",
    "runinfo",
    "schema",
    "stats",
    "synth",
    "transform",
    "validate",
    "values",
]


def __getattr__(name: str) -> object:
    """``SCHEMA_VERSION`` on first use, not by ``import traces.errors``: every package's
    errors derive from ``traces.errors.UserError``, and the simulator and ``loadgen --help``
    need no pyarrow (about 0.1 s to import)."""
    if name == "SCHEMA_VERSION":
        from traces.schema import SCHEMA_VERSION

        return SCHEMA_VERSION
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
