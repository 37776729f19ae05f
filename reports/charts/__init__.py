"""Charts as inline SVG (matplotlib): the figure machinery, one-run and comparison charts.

matplotlib is an optional extra, imported inside the functions that draw, so importing a
chart module costs nothing. Imports ``reports.theme`` and ``analyzers`` only: never
``loadgen``, httpx or click.
"""

__all__ = [
    "cache",
    "compare",
    "figure",
    "run",
]
