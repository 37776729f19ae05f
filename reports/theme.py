"""The report's look: the Okabe-Ito palette, the page CSS (light and dark), chart settings.

Charts are drawn with *sentinel* colours for their foreground (text, axes, ticks) and grid;
``themed_svg`` swaps them for CSS variables, so one inline SVG follows the page's
``prefers-color-scheme``. The data colours are Okabe-Ito (distinguishable with the common
colour-vision deficiencies), which read on both the light and the dark background; its black
is replaced by a neutral grey that reads on both.

Imports nothing of ours and nothing heavy (matplotlib settings are plain values).
"""

from __future__ import annotations

from typing import Final

OKABE_ITO: Final = (
    "#0072B2",  # blue
    "#E69F00",  # orange
    "#009E73",  # bluish green
    "#CC79A7",  # reddish purple
    "#56B4E9",  # sky blue
    "#D55E00",  # vermillion
    "#F0E442",  # yellow
    "#999999",  # grey (Okabe-Ito's black, which would vanish on the dark background)
)
"""Series colours, most distinguishable first."""

FG_SENTINEL: Final = "#010203"
"""Foreground colour charts are drawn with; becomes ``var(--fg)`` in the page."""
GRID_SENTINEL: Final = "#040506"
"""Grid colour charts are drawn with; becomes ``var(--grid)`` in the page."""
MUTED_SENTINEL: Final = "#070809"
"""Secondary lines (SLO, budget outlines); becomes ``var(--muted)`` in the page."""

SLO_COLOUR: Final = "#D55E00"
"""SLO and budget-limit lines: vermillion, set apart from the series by a dash pattern."""

FONT_STACK: Final = (
    'system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, "Noto Sans", '
    '"Liberation Sans", sans-serif'
)


def series_colour(index: int) -> str:
    """The colour of the ``index``-th series (cycling)."""
    return OKABE_ITO[index % len(OKABE_ITO)]


def matplotlib_rc() -> dict[str, object]:
    """rcParams for every chart: SVG text kept as text (small, and drawn in the page's own
    font, so no font is embedded or fetched), sentinel foreground colours, transparent
    backgrounds, an explicit font family so matplotlib never searches and warns."""
    return {
        "svg.fonttype": "none",
        "font.family": "sans-serif",
        "font.sans-serif": ["DejaVu Sans"],
        "font.size": 10.0,
        "axes.titlesize": 11.0,
        "axes.labelsize": 10.0,
        "legend.fontsize": 9.0,
        "text.color": FG_SENTINEL,
        "axes.labelcolor": FG_SENTINEL,
        "axes.edgecolor": FG_SENTINEL,
        "axes.titlecolor": FG_SENTINEL,
        "xtick.color": FG_SENTINEL,
        "ytick.color": FG_SENTINEL,
        "axes.facecolor": "none",
        "figure.facecolor": "none",
        "savefig.facecolor": "none",
        "savefig.edgecolor": "none",
        "axes.grid": True,
        "grid.color": GRID_SENTINEL,
        "grid.linewidth": 0.6,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "legend.frameon": False,
        "path.simplify": True,
    }


def themed_svg(svg: str) -> str:
    """Replace the sentinel colours of a matplotlib SVG by the page's CSS variables."""
    for sentinel, var in (
        (FG_SENTINEL, "var(--fg)"),
        (GRID_SENTINEL, "var(--grid)"),
        (MUTED_SENTINEL, "var(--muted)"),
    ):
        svg = svg.replace(sentinel, var).replace(sentinel.upper(), var)
    return svg


PAGE_CSS: Final = (
    """
:root { color-scheme: light dark; --bg: #ffffff; --fg: #1b1b1b; --muted: #5c5c5c;
  --grid: #dedede; --panel: #f5f6f7; --border: #d0d4d9; --ok: #007a5a; --warn: #a34700;
  --bad: #b3261e; }
@media (prefers-color-scheme: dark) {
  :root { --bg: #15171a; --fg: #e8e8e8; --muted: #a8a8a8; --grid: #3a3d42; --panel: #1f2226;
    --border: #3a3f46; --ok: #4cc38a; --warn: #f0a94c; --bad: #ff8a80; }
}
* { box-sizing: border-box; }
body { margin: 0 auto; max-width: 1200px; padding: 24px; background: var(--bg);
  color: var(--fg); font: 15px/1.45 FONT_STACK; }
h1 { font-size: 1.6em; margin: 0 0 4px; }
h2 { font-size: 1.25em; margin: 32px 0 8px; border-bottom: 1px solid var(--border);
  padding-bottom: 4px; }
h3 { font-size: 1.05em; margin: 20px 0 6px; }
.sub { color: var(--muted); margin: 0 0 16px; }
dl.facts { display: grid; grid-template-columns: max-content 1fr; gap: 2px 16px; margin: 0; }
dl.facts dt { color: var(--muted); }
dl.facts dd { margin: 0; overflow-wrap: anywhere; }
.verdicts { list-style: none; padding: 0; margin: 8px 0; }
.verdicts li { padding: 6px 10px; margin: 4px 0; border-left: 4px solid var(--border);
  background: var(--panel); }
.verdicts li.ok { border-color: var(--ok); }
.verdicts li.warn { border-color: var(--warn); }
.verdicts li.bad { border-color: var(--bad); }
.badge { font-weight: 600; margin-right: 6px; }
.ok .badge { color: var(--ok); } .warn .badge { color: var(--warn); }
.bad .badge { color: var(--bad); }
.scroll { overflow-x: auto; }
table { border-collapse: collapse; margin: 8px 0 16px; font-variant-numeric: tabular-nums; }
caption { text-align: left; font-weight: 600; padding: 4px 0; }
th, td { padding: 3px 10px; border-bottom: 1px solid var(--border); }
th { text-align: left; background: var(--panel); }
td.n, th.n { text-align: right; }
figure { margin: 16px 0 24px; }
figure svg { width: 100%; height: auto; display: block; }
figcaption { color: var(--muted); font-size: 0.92em; margin-top: 4px; }
.note { color: var(--muted); }
footer { margin-top: 40px; color: var(--muted); font-size: 0.9em; }
"""
).replace("FONT_STACK", FONT_STACK)
"""The whole page's CSS: light by default, dark under ``prefers-color-scheme: dark``."""
