"""Numbers as the reports and the commands print them: the one place a table cell or a
summary line gets its digits, so that one value reads the same in the console, the
Markdown and the HTML.

Every function prints ``-`` for a missing value (None). Pure string formatting: imports
nothing, so that light commands (``loadgen trace info``) can use it.

Two notations stay in ``analyzers``, because the analyzers write them into their results
before any report exists: the engineering notation of the budget's arithmetic chains
(``analyzers/budget/formatting.py``; ``reports/plan.py`` heads each chain with a value in
the same notation), and the notation of objective labels, verdict reasons and comparison
verdicts (``analyzers/slo/parse.py``, ``analyzers/compare/runs.py``).
"""

from __future__ import annotations

MISSING = "-"
"""What a missing value prints as."""


def number(value: float | None) -> str:
    """About three significant figures, thousands separated: ``1,234``, ``12.3``, ``1.23``."""
    if value is None:
        return MISSING
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def fixed(value: float | None, spec: str = ".3f", unit: str = "") -> str:
    """``format(value, spec)`` and a unit as given (with its space): ``0.125``,
    ``fixed(12.5, ".1f", " ms")`` is ``12.5 ms``; an int with ``spec="d"``."""
    return MISSING if value is None else format(value, spec) + unit


def ms(value: float | None) -> str:
    """Milliseconds to one decimal, thousands separated: ``1,234.5 ms``."""
    return fixed(value, ",.1f", " ms")


def percent(value: float | None, digits: int = 1) -> str:
    """A fraction as a percentage: ``0.953`` is ``95.3%`` (``digits`` decimals)."""
    return fixed(value, f".{digits}%")


def in_unit(value: float, unit: str) -> str:
    """A metric's value for a table: a fraction as a percentage, anything else as a
    ``number`` (the unit goes in the column's header)."""
    return percent(value) if unit == "fraction" else number(value)


def signed_interval(low: float, high: float, unit: str = "") -> str:
    """A difference's confidence interval, signed, one decimal: ``[-1.5, +2,300.0] ms``
    (``unit`` as given, with its space)."""
    return f"[{low:+,.1f}, {high:+,.1f}]{unit}"


def slo_word(meets: bool | None) -> str:
    """A sweep step against its SLOs, the same word in every report: ``meets``, ``breaks``
    or ``-`` (no SLO)."""
    return MISSING if meets is None else ("meets" if meets else "breaks")


def flags(kinds: tuple[str, ...]) -> str:
    """A step's validity flags for a table cell: ``valid``, or the flag kinds
    (``client_bound, too_small``)."""
    return ", ".join(dict.fromkeys(kinds)) if kinds else "valid"
