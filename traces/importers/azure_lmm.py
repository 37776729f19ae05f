"""Azure LMM (multimodal) inference trace 2025 (ModServe), CSV -> workload table.

Source format (reference/traces.md §1.4; Azure/AzurePublicDataset AzureLMMInferenceDataset2025.md)::

    TIMESTAMP,NumImages,ContextTokens,GeneratedTokens
    2024-10-15T12:00:00.269Z,0,770,491

* Times are ISO-8601 UTC with milliseconds; ``arrival_s`` is seconds from the first row.
* The trace gives only the *number* of images. Their sizes are synthesized
  deterministically: every image is ``--image-size`` (default 1920x1080). Why that size:
  it is a common photo/screenshot resolution, and under Qwen2-VL's default pixel cap it is
  1,222 image tokens, one of the two sizes that carry most of ServeGen's real per-image
  token mass (reference/traces.md §1.8, models-and-hardware.md table of worked counts). A
  fixed size keeps the image cost of a request proportional to ``NumImages``, which is all
  the trace tells. ``image_tokens`` is left null: it depends on the served model.
* Whether ``ContextTokens`` includes image tokens is not documented upstream; it is kept
  as the text ``input_tokens`` unchanged (so a replay may count image tokens twice if it
  does include them; see docs/traces.md).
* Rows with images get workload ``image`` and the others ``text``; all use the chat API,
  the only one that carries images.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from traces import schema as s
from traces.importers.azure_llm import NUM_IMAGES, SOURCE_COLUMNS, iter_azure
from traces.importers.base import LINE_COLUMN, Importer, ImportOptions
from traces.importers.errors import SourceError
from traces.importers.sink import TraceSink
from traces.records import ImageSpec

DEFAULT_IMAGE = ImageSpec(width=1920, height=1080)


def read(path: Path, options: ImportOptions, sink: TraceSink) -> None:
    """Stream an Azure LMM 2025 CSV into ``sink``, synthesizing one image size per image."""
    size = options.image_size or DEFAULT_IMAGE
    image = {"width": size.width, "height": size.height}
    sink.note("image_size", f"{size.width}x{size.height}")
    for batch in iter_azure(path, options, sink, fmt="azure_mm2025", with_images=True):
        counts = batch.num_images
        assert counts is not None
        negative = pc.less(counts, 0)
        if pc.any(negative).as_py():
            i = int(pc.index(negative, True).as_py())
            line = int(batch.table.column(LINE_COLUMN)[i].as_py())
            raise SourceError(
                path.name, line=line, column=NUM_IMAGES, problem=f"negative image count {counts[i]}"
            )
        n_list = counts.to_pylist()
        images = pa.array([[image] * n if n else None for n in n_list], pa.list_(s.IMAGE_TYPE))
        workload = pa.array(["image" if n else "text" for n in n_list], pa.string())
        table = batch.table.set_column(
            batch.table.schema.get_field_index(s.API),
            s.API,
            pa.array([s.API_CHAT] * len(n_list), pa.string()),
        )
        table = table.append_column(s.IMAGES, images).append_column(s.WORKLOAD, workload)
        sink.add(table)
        if sink.done:
            return


IMPORTER = Importer(
    name="azure_mm2025",
    summary="Azure LMM multimodal 2025 / ModServe CSV (NumImages -> synthesized images)",
    read=read,
    options=frozenset({"image_size"}),
    source_columns=SOURCE_COLUMNS,
)
