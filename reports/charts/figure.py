"""Chart machinery: a matplotlib figure drawn under the report's settings, saved as an SVG
fragment that can be inlined in a page (no XML prolog, no metadata, ids unique per chart,
colours following the page's light or dark scheme).

matplotlib is imported inside the functions (the Agg-free object-oriented ``Figure`` API:
no display, no pyplot state), so importing this module costs nothing. The chart families
live in ``charts_run`` and ``charts_compare``; they draw what analyzers computed and compute
nothing themselves. Must not import loadgen.
"""

from __future__ import annotations

import io
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, cast

from reports.theme import OKABE_ITO, matplotlib_rc, themed_svg

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

WIDTH_IN: Final = 10.0
"""Figure width in inches; the page scales the SVG to its column."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Chart:
    """One rendered chart: an id unique in the page, a title, the inline SVG and a caption
    saying what is drawn (also the SVG's accessible name)."""

    chart_id: str
    title: str
    svg: str
    caption: str


_ID: Final = re.compile(r'\bid="([^"]+)"')
_PROLOG: Final = re.compile(r"^.*?(?=<svg\b)", re.S)
_METADATA: Final = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_XMLNS: Final = re.compile(r'\s+xmlns(?::\w+)?="[^"]*"')


def inline_svg(svg: str, chart_id: str, title: str) -> str:
    """Make a matplotlib SVG document an inline fragment: drop the XML prolog, doctype,
    metadata and namespace declarations (an HTML parser supplies the SVG namespace), prefix
    every id with ``chart_id`` so that several charts share one page, add an accessible
    ``<title>``, and swap the sentinel colours for the page's CSS variables."""
    svg = _PROLOG.sub("", svg, count=1)
    svg = _METADATA.sub("", svg)
    svg = _XMLNS.sub("", svg)
    ids = set(_ID.findall(svg))

    def rename(m: re.Match[str]) -> str:
        return f'id="{chart_id}-{m.group(1)}"'

    svg = _ID.sub(rename, svg)
    for old in sorted(ids, key=len, reverse=True):
        new = f"{chart_id}-{old}"
        svg = svg.replace(f"url(#{old})", f"url(#{new})").replace(
            f'href="#{old}"', f'href="#{new}"'
        )
    safe_title = title.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    svg = re.sub(
        r"<svg\b([^>]*)>",
        lambda m: (
            f'<svg{m.group(1)} role="img" aria-labelledby="{chart_id}-title">'
            f'<title id="{chart_id}-title">{safe_title}</title>'
        ),
        svg,
        count=1,
    )
    return themed_svg(svg.strip())


def render(
    chart_id: str,
    title: str,
    caption: str,
    draw: Callable[[Figure], None],
    *,
    height_in: float = 4.2,
    width_in: float = WIDTH_IN,
) -> Chart:
    """Create a figure under the report's rcParams, let ``draw`` fill it, save it as SVG."""
    import matplotlib
    from cycler import cycler
    from matplotlib.backends.backend_svg import FigureCanvasSVG
    from matplotlib.figure import Figure

    rc = {
        **matplotlib_rc(),
        "axes.prop_cycle": cycler(color=list(OKABE_ITO)),
        # Salted per chart: clip-path and marker ids are then distinct and deterministic.
        "svg.hashsalt": chart_id,
    }
    # rc_context's stubs type keys as a Literal of every rcParam name; ours are plain str.
    with matplotlib.rc_context(cast("Any", rc)):
        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        FigureCanvasSVG(fig)
        draw(fig)
        buf = io.StringIO()
        fig.savefig(
            buf,
            format="svg",
            metadata={"Creator": None, "Date": None, "Format": None, "Type": None},
        )
    return Chart(
        chart_id=chart_id,
        title=title,
        svg=inline_svg(buf.getvalue(), chart_id, title),
        caption=caption,
    )


def wide_range(values: Sequence[float], ratio: float = 30.0) -> bool:
    """True when the positive values span more than ``ratio`` (a log axis reads better)."""
    positive = [v for v in values if v > 0]
    return bool(positive) and max(positive) / min(positive) > ratio


def no_data(ax: Axes, text: str = "no data") -> None:
    """Mark an empty panel."""
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])
