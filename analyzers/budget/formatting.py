"""Numbers as the arithmetic chains print them: ``70.55e9``, ``1.2e15``, ``0.47 s``, ``42.95 GB``.

Engineering notation (exponents in steps of three) with up to four significant digits
and no trailing zeros, so a chain reads like the seeds: ``2 x 70.55e9 x 4000 / 1.2e15 =
0.47 s``. Pure string formatting: this module must not import ``loadgen``, httpx or
polars.

Why it lives here and not in ``reports/fmt.py``: the chains are part of the budget's
results (``Prediction.chain``, ``ClaimVerdict.chains``, written by ``report`` and
``claims``), and analyzers may not import reports. ``reports.plan`` uses the same notation
for the values that head the chains.
"""

from __future__ import annotations

import math


def _trim(text: str) -> str:
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def fmt(x: float, sig: int = 4) -> str:
    """A number in engineering notation with ``sig`` significant digits, zeros trimmed.

    Integers below a million print whole (``4000``, ``131072``); ``70.55e9``; ``1.2e15``;
    ``0.0175``.
    """
    if math.isnan(x) or math.isinf(x):
        return str(x)
    if x == 0:
        return "0"
    if float(x).is_integer() and abs(x) < 1e6:
        return str(int(x))
    exp = math.floor(math.log10(abs(x)))
    if -3 <= exp < 6:
        decimals = max(0, sig - 1 - exp)
        return _trim(f"{x:.{decimals}f}")
    eng = 3 * math.floor(exp / 3)
    mantissa = x / 10**eng
    decimals = max(0, sig - 1 - (exp - eng))
    text = _trim(f"{mantissa:.{decimals}f}")
    if text in ("1000", "-1000"):  # rounding carried into the next step
        text, eng = text[:-3], eng + 3
    return f"{text}e{eng}"


def fmt_s(seconds: float) -> str:
    """A duration with a unit: ``0.47 s``, ``14.7 ms``, ``850 us`` (three significant digits)."""
    if seconds != 0 and abs(seconds) < 1e-3:
        return f"{fmt(seconds * 1e6, 3)} us"
    if seconds != 0 and abs(seconds) < 0.1:
        return f"{fmt(seconds * 1e3, 3)} ms"
    return f"{fmt(seconds, 3)} s"


def fmt_bytes(n_bytes: float) -> str:
    """Decimal bytes: ``327,680 B`` below a megabyte, then ``MB``/``GB``/``TB``, 4 digits."""
    if abs(n_bytes) < 1e6:
        return f"{n_bytes:,.0f} B"
    for unit, scale in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if abs(n_bytes) >= scale:
            return f"{fmt(n_bytes / scale)} {unit}"
    return f"{n_bytes:,.0f} B"  # pragma: no cover - unreachable


def fmt_count(n: float) -> str:
    """A count with thousands separators: ``172,032``."""
    return f"{n:,.0f}"
