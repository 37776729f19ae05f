"""TTFT decomposition: where the time to first token went, against the budget model.

``decompose(run, budget, options)`` (:mod:`analyzers.decompose.run`) splits every ok
request's ``first_token - due`` into the client chain and the server split
(:mod:`analyzers.decompose.terms`, its network and calibration fits in
:mod:`analyzers.decompose.network` and :mod:`analyzers.decompose.fits`, with the load-aware
prediction of :mod:`analyzers.decompose.load`), then reports per class and percentile the tail's
composition, each term against its budget and the verdicts
(:mod:`analyzers.decompose.report`). Must not import loadgen, reports or httpx.

The names below are re-exported lazily (PEP 562), so that importing one submodule (the
``BudgetModel`` of :mod:`analyzers.decompose.model`, say) does not load Polars.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from analyzers.decompose import (
        admission,
        chunking,
        columns,
        deployment,
        fits,
        load,
        model,
        network,
        options,
        report,
        results,
        run,
        slotprefill,
        terms,
    )
    from analyzers.decompose.columns import CLIENT_TERMS, SERVER_TERMS, TERMS
    from analyzers.decompose.model import BudgetModel
    from analyzers.decompose.options import DecomposeOptions
    from analyzers.decompose.report import (
        ClassDecomposition,
        Decomposition,
        LoadWindow,
        SloBreak,
        TailComposition,
        TermStat,
    )
    from analyzers.decompose.results import (
        CalibrationResult,
        NetworkEstimate,
        RequestTerms,
        SourceOf,
        Unidentified,
    )
    from analyzers.decompose.run import decompose
    from analyzers.decompose.terms import request_terms

__all__ = [
    "CLIENT_TERMS",
    "SERVER_TERMS",
    "TERMS",
    "BudgetModel",
    "CalibrationResult",
    "ClassDecomposition",
    "DecomposeOptions",
    "Decomposition",
    "LoadWindow",
    "NetworkEstimate",
    "RequestTerms",
    "SloBreak",
    "SourceOf",
    "TailComposition",
    "TermStat",
    "Unidentified",
    "admission",
    "chunking",
    "columns",
    "decompose",
    "deployment",
    "fits",
    "load",
    "model",
    "network",
    "options",
    "report",
    "request_terms",
    "results",
    "run",
    "slotprefill",
    "terms",
]

# Where each re-exported name is defined, relative to this package; the other names of
# ``__all__`` are the submodules themselves.
_SOURCES: Final[dict[str, tuple[str, ...]]] = {
    "model": ("BudgetModel",),
    "report": (
        "ClassDecomposition",
        "Decomposition",
        "LoadWindow",
        "SloBreak",
        "TailComposition",
        "TermStat",
    ),
    "run": ("decompose",),
    "columns": ("CLIENT_TERMS", "SERVER_TERMS", "TERMS"),
    "options": ("DecomposeOptions",),
    "results": (
        "CalibrationResult",
        "NetworkEstimate",
        "RequestTerms",
        "SourceOf",
        "Unidentified",
    ),
    "terms": ("request_terms",),
}
_EXPORTS: Final = {name: module for module, names in _SOURCES.items() for name in names}


def __getattr__(name: str) -> object:
    """Import a public name's module on first use and keep the name here."""
    if name in _EXPORTS:
        value = getattr(importlib.import_module(f".{_EXPORTS[name]}", __name__), name)
    elif name in __all__:
        value = importlib.import_module(f".{name}", __name__)
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value  # later lookups are plain attribute reads
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
