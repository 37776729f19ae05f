"""Exceptions of the analyzers (metrics, decomposition, gates and the budget model).

Tree::

    UserError                       (traces.errors) base of every package's errors
    └── AnalyzerError               root; ``exit_code`` is what the CLI returns (2: bad input)
        ├── BudgetError             unknown model, GPU or link; bad catalog or budget file;
        │   │                       an impossible deployment (a dtype the GPU lacks)
        │   └── CapacityError       a request can never fit in an instance's KV cache
        ├── SLOError                a malformed SLO file or rule; names the key or rule (2)
        ├── InvalidRunError         a run directory that cannot be analysed (3)
        ├── SLOBreach               a gate found an SLO broken (1)
        ├── InfrastructureError     the endpoint or infrastructure failed: most requests
        │                           are connect errors, timeouts or 502/503/504 (4)
        └── DifferentTracesError    runs of different traces compared without
                                    ``--allow-different-traces`` (2)

Subclassed by what the caller does next: fix the input (2), re-run (3), act on the
breach (1), or fix the endpoint or the network before judging it (4). Every message is
one line a user can act on; where a name was not found, the message lists the known
names. This module imports only ``traces.errors``.
"""

from __future__ import annotations

from traces.errors import UserError


class AnalyzerError(UserError):
    """Root of the analyzers' errors; ``exit_code`` is what the CLI returns."""

    exit_code = 2


class BudgetError(AnalyzerError):
    """A budget input is wrong: an unknown name, a bad catalog entry or file, a bad value."""


class CapacityError(BudgetError):
    """A request can never fit in the instance's KV cache; the message says by how much.

    The scheduler raises it on admission; the offline timeline counts such a request as
    never served, and the simulator answers it with HTTP 400."""


class SLOError(AnalyzerError):
    """An SLO file or rule is malformed (exit 2); the message names the key or rule."""


class InvalidRunError(AnalyzerError):
    """A run directory is missing files, empty, or inconsistent with its trace."""

    exit_code = 3


class SLOBreach(AnalyzerError):
    """A gate found at least one SLO broken; the message names the first."""

    exit_code = 1


class InfrastructureError(AnalyzerError):
    """The run measured a broken endpoint or network, not the deployment's latency."""

    exit_code = 4


class DifferentTracesError(AnalyzerError):
    """Runs (or a run and its baseline) replayed different traces."""
