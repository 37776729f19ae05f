"""The contract between the import registry and a format module.

``ImportOptions`` carries the common options (limit, workload label, time window, reorder
window, input clipping) and the format-specific ones; an ``Importer`` names the
format-specific options it understands, so that an option given to the wrong format is an
error instead of being silently ignored. A format module reads its source in batches and
feeds a ``TraceSink`` (traces.importers.sink); it never holds the whole file in memory.

Imports nothing outside ``traces`` and the standard library.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from traces.importers.errors import ImportOptionError
from traces.records import ImageSpec

if TYPE_CHECKING:
    from traces.importers.sink import TraceSink

LINE_COLUMN = "_source_line"
"""Extra column an importer adds to every batch: the 1-based source line of each row.

The sink uses it to name the line of a bad value and drops it before writing."""

COMMON_OPTIONS = frozenset(
    {"limit", "workload", "start_s", "end_s", "sort_window", "max_input_tokens", "batch_rows"}
)


@dataclass(frozen=True, slots=True, kw_only=True)
class ImportOptions:
    """Options of one import. Times are seconds from the source's first row.

    ``start_s``/``end_s`` keep rows with ``start_s <= offset <= end_s``; the output's
    ``arrival_s`` is re-zeroed at ``start_s`` (or at the first kept row when no start).
    ``sort_window`` > 0 reorders an unordered source within that many rows; 0 means a row
    that arrives before its predecessor is an error.
    """

    limit: int | None = None
    workload: str | None = None
    start_s: float | None = None
    end_s: float | None = None
    sort_window: int = 0
    max_input_tokens: int | None = None
    batch_rows: int = 65_536
    # format-specific
    block_size: int | None = None
    keep_failed: bool = False
    rate: float | None = None
    seed: int = 0
    tokens_per_word: float = 1.0
    turns: str = "first"
    think_s: float | None = None
    columns: tuple[tuple[str, str], ...] = ()
    """``dataset``: (trace target, source column) pairs of ``--map``."""
    image_size: ImageSpec | None = None
    output_tokens: int | None = None
    """``aiperf``: output tokens of a turn without ``output_length``."""

    def __post_init__(self) -> None:
        if self.limit is not None and self.limit <= 0:
            raise ImportOptionError(f"--limit must be positive, got {self.limit}")
        if self.start_s is not None and self.start_s < 0:
            raise ImportOptionError(f"--start must be >= 0 seconds, got {self.start_s}")
        if self.start_s is not None and self.end_s is not None and self.end_s < self.start_s:
            raise ImportOptionError(f"--end {self.end_s} is before --start {self.start_s}")
        if self.sort_window < 0:
            raise ImportOptionError(f"--sort-window must be >= 0 rows, got {self.sort_window}")
        if self.max_input_tokens is not None and self.max_input_tokens <= 0:
            raise ImportOptionError(
                f"--max-input-tokens must be positive, got {self.max_input_tokens}"
            )
        if self.batch_rows <= 0:
            raise ImportOptionError(f"batch_rows must be positive, got {self.batch_rows}")
        if self.block_size is not None and self.block_size <= 0:
            raise ImportOptionError(f"--block-size must be positive, got {self.block_size}")
        if self.rate is not None and not self.rate > 0:
            raise ImportOptionError(f"--rate must be positive, got {self.rate}")
        if not self.tokens_per_word > 0:
            raise ImportOptionError(
                f"--tokens-per-word must be positive, got {self.tokens_per_word}"
            )
        if self.think_s is not None and not (self.think_s >= 0 and math.isfinite(self.think_s)):
            raise ImportOptionError(f"--think-s must be >= 0 seconds, got {self.think_s}")
        if self.turns not in ("first", "all"):
            raise ImportOptionError(f"--turns must be 'first' or 'all', got {self.turns!r}")
        if self.image_size is not None and min(self.image_size.width, self.image_size.height) <= 0:
            raise ImportOptionError("--image-size must be positive WIDTHxHEIGHT")
        if self.output_tokens is not None and self.output_tokens <= 0:
            raise ImportOptionError(f"--output-tokens must be positive, got {self.output_tokens}")

    def changed(self) -> dict[str, Any]:
        """The options that differ from their defaults, JSON-ready (for provenance)."""
        out: dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if value == f.default:
                continue
            if isinstance(value, ImageSpec):
                value = f"{value.width}x{value.height}"
            out[f.name] = value
        return out


class ImportFunction(Protocol):
    """Reads ``path`` in batches and feeds them to ``sink`` until the source or the sink ends."""

    def __call__(self, path: Path, options: ImportOptions, sink: TraceSink) -> None: ...


@dataclass(frozen=True, slots=True, kw_only=True)
class Importer:
    """One public format: its name, how to read it and which specific options it takes."""

    name: str
    summary: str
    read: ImportFunction
    options: frozenset[str] = field(default_factory=frozenset)
    source_columns: Mapping[str, str] = field(default_factory=dict)
    """Trace column -> source column name, so that errors name the column the user sees."""
    block_size: int | None = None
    """Prefix block size in tokens when the format carries block hashes."""
    ids_from_source: bool = False
    """Request ids come from the source file, so the sink checks they are unique."""

    def check(self, options: ImportOptions) -> None:
        """Raise ``ImportOptionError`` when a format-specific option does not apply."""
        for f in fields(options):
            if f.name in COMMON_OPTIONS or f.name in self.options:
                continue
            if getattr(options, f.name) != f.default:
                flag = "--" + f.name.replace("_", "-")
                raise ImportOptionError(f"option {flag} does not apply to format {self.name!r}")
