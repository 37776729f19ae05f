"""Exceptions of the analyzers (metrics, decomposition, gates and the budget model).

Tree::

    AnalyzerError                   root; ``exit_code`` is what the CLI returns (2: bad input)
    ├── BudgetError                 unknown model, GPU or link; bad catalog or budget file;
    │                               an impossible deployment (a dtype the GPU lacks)
    ├── InvalidRunError             a run directory that cannot be analysed (3)
    ├── SLOBreach                   a gate found an SLO broken (1)
    ├── InfrastructureError         the endpoint or infrastructure failed: most requests
    │                               are connect errors, timeouts or 502/503/504 (4)
    └── DifferentTracesError        runs of different traces compared without
                                    ``--allow-different-traces`` (2)

Subclassed by what the caller does next: fix the input (2), re-run (3), act on the
breach (1), or fix the endpoint or the network before judging it (4). Every message is
one line a user can act on; where a name was not found, the message lists the known
names. This module imports nothing.
"""

from __future__ import annotations


class AnalyzerError(Exception):
    """Root of the analyzers' errors; ``exit_code`` is what the CLI returns."""

    exit_code = 2


class BudgetError(AnalyzerError):
    """A budget input is wrong: an unknown name, a bad catalog entry or file, a bad value."""


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
