"""The explicit registry of public trace formats and the one entry point that runs them.

Adding a format: write ``traces/importers/<format>.py`` with a ``read`` function and an
``Importer``, and add it to ``REGISTRY`` below. Nothing registers itself at import.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from traces.importers import (
    azure_llm,
    azure_lmm,
    burstgpt,
    dataset,
    mooncake,
    servegen,
    sharegpt,
    splitwise,
)
from traces.importers.aiperf import custom as aiperf
from traces.importers.aiperf import dag as aiperf_dag
from traces.importers.base import Importer, ImportOptions
from traces.importers.errors import ImportOptionError
from traces.importers.sink import ImportResult, TraceSink

IMPORTER_VERSION: Final = 1
"""Bumped when an importer's output for the same input and options changes."""

REGISTRY: Final[dict[str, Importer]] = {
    "mooncake": mooncake.IMPORTER,
    "azure2023": azure_llm.IMPORTER_2023,
    "azure2024": azure_llm.IMPORTER_2024,
    "azure_mm2025": azure_lmm.IMPORTER,
    "burstgpt": burstgpt.IMPORTER,
    "sharegpt": sharegpt.IMPORTER,
    "splitwise": splitwise.IMPORTER,
    "servegen": servegen.IMPORTER,
    "dataset": dataset.IMPORTER,
    "aiperf": aiperf.IMPORTER,
    "aiperf_dag": aiperf_dag.IMPORTER,
}


def get_importer(fmt: str) -> Importer:
    """The importer of a format name, or ``ImportOptionError`` listing the known names."""
    try:
        return REGISTRY[fmt]
    except KeyError:
        raise ImportOptionError(
            f"unknown trace format {fmt!r} (known: {', '.join(sorted(REGISTRY))})"
        ) from None


def import_trace(fmt: str, source: Path, out: Path, options: ImportOptions) -> ImportResult:
    """Convert ``source`` in format ``fmt`` into the trace file ``out`` (schema v1).

    Streams the source; the output is written to ``out``.tmp and renamed on success, with
    provenance (format, source file name, block size, options, time origin, counts) in its
    file metadata. Raises ``TraceError`` subclasses naming file, line and column.
    """
    importer = get_importer(fmt)
    importer.check(options)
    source = Path(source)
    block_size = options.block_size or importer.block_size
    provenance = {
        "source": f"import:{fmt}",
        "source_format": fmt,
        "source_file": source.name,
        "block_size": block_size,
        "import_options": options.changed(),
        "importer_version": IMPORTER_VERSION,
    }
    sink = TraceSink(
        Path(out),
        where=source.name,
        options=options,
        source_columns=importer.source_columns,
        provenance=provenance,
        block_size=block_size,
        unique_ids=importer.ids_from_source,
    )
    try:
        importer.read(source, options, sink)
    except BaseException:
        sink.abort()
        raise
    return sink.close()
