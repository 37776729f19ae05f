"""On-disk truth of llm-loadgen: the workload (trace) table and the run table.

This package depends on pyarrow only and imports nothing else of the project.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from traces.schema import SCHEMA_VERSION

__all__ = ["SCHEMA_VERSION"]


def __getattr__(name: str) -> object:
    # Loaded on first use, not by ``import traces.errors``: every package's errors derive
    # from ``traces.errors.UserError``, and the simulator and ``loadgen --help`` need no
    # pyarrow (about 0.1 s to import).
    if name == "SCHEMA_VERSION":
        from traces.schema import SCHEMA_VERSION

        return SCHEMA_VERSION
    raise AttributeError(f"module 'traces' has no attribute {name!r}")
