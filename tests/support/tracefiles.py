"""Small text traces written for a test: given arrival times and prompt lengths, one
Parquet trace through ``traces.io.write_trace`` (on the test path via pytest's
``pythonpath``; not a test module)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pyarrow as pa

from traces.io import write_trace


def write_arrivals(
    path: Path,
    arrivals: Sequence[float],
    input_tokens: Sequence[int],
    *,
    output_tokens: int = 2,
    id_width: int = 3,
) -> Path:
    """A trace of ``len(arrivals)`` text requests ``q000``, ``q001``, ... (ids of
    ``id_width`` digits): request ``i`` arrives at ``arrivals[i]`` s with
    ``input_tokens[i]`` prompt tokens and asks for ``output_tokens``."""
    if len(arrivals) != len(input_tokens):
        raise ValueError("one prompt length per arrival")
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i:0{id_width}d}" for i in range(len(arrivals))],
                "arrival_s": list(arrivals),
                "input_tokens": list(input_tokens),
                "output_tokens": [output_tokens] * len(arrivals),
            }
        ),
        path,
    )
    return path
