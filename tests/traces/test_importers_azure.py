"""Azure importers: real 2023 heads (Splitwise), and hand-written 2023/2024/2025 files.

The 2024 and 2025 files are not in the samples; the fixtures follow the columns and the
timestamp forms documented in ../shared/reference/traces.md §1.3-1.4 (mixed precision with
a zone; ISO ``Z`` with milliseconds; NumImages).
"""

from __future__ import annotations

import csv
from datetime import datetime
from pathlib import Path

import pyarrow.compute as pc
import pytest

from traces import schema as s
from traces.importers.base import ImportOptions
from traces.importers.errors import ImportOptionError, SourceError
from traces.importers.registry import import_trace
from traces.io import read_metadata, read_trace_table
from traces.records import ImageSpec

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "../shared/traces-samples"
DATA = Path(__file__).parent / "data"
needs_samples = pytest.mark.skipif(
    not SAMPLES.is_dir(), reason=f"real trace samples absent: {SAMPLES} (needs ../shared)"
)


def _ns(stamp: str) -> int:
    """Naive 'YYYY-mm-dd HH:MM:SS.fffffff' as integer ns, parsed by hand (7 digits)."""
    whole, _, frac = stamp.partition(".")
    base = datetime.strptime(whole, "%Y-%m-%d %H:%M:%S")
    seconds = int((base - datetime(2000, 1, 1)).total_seconds())
    return seconds * 10**9 + int(frac.ljust(9, "0"))


@needs_samples
@pytest.mark.parametrize("kind", ["code", "conv"])
def test_real_2023_heads_reproduce_raw_statistics(tmp_path: Path, kind: str) -> None:
    src = SAMPLES / f"azure_llm_2023/AzureLLMInferenceTrace_{kind}.head2000.csv"
    with src.open() as fh:
        raw = list(csv.DictReader(fh))
    out = tmp_path / "a.parquet"
    result = import_trace("azure2023", src, out, ImportOptions())
    table = read_trace_table(out)
    assert result.rows == table.num_rows == len(raw) == 2000
    mean_in = sum(int(r["ContextTokens"]) for r in raw) / len(raw)
    mean_out = sum(int(r["GeneratedTokens"]) for r in raw) / len(raw)
    assert pc.mean(table.column(s.INPUT_TOKENS)).as_py() == pytest.approx(mean_in)
    assert pc.mean(table.column(s.OUTPUT_TOKENS)).as_py() == pytest.approx(mean_out)
    t0 = _ns(raw[0]["TIMESTAMP"])
    expected = [(_ns(r["TIMESTAMP"]) - t0) / 1e9 for r in raw]
    assert table.column(s.ARRIVAL_S).to_pylist() == pytest.approx(expected, abs=1e-9)
    meta = read_metadata(out)
    assert meta["source_time_origin"] == raw[0]["TIMESTAMP"]
    assert meta["source_format"] == "azure2023"


@needs_samples
def test_real_code_head_second_row_is_52_ms_after_the_first(tmp_path: Path) -> None:
    # microsoft/vidur's converted copy starts 0.0, 0.052 (reference/traces.md §1.2)
    out = tmp_path / "a.parquet"
    import_trace(
        "azure2023",
        SAMPLES / "azure_llm_2023/AzureLLMInferenceTrace_code.head2000.csv",
        out,
        ImportOptions(limit=2),
    )
    assert read_trace_table(out).column(s.ARRIVAL_S).to_pylist() == pytest.approx([0.0, 0.052])


def test_2023_seven_fractional_digits_keep_100ns(tmp_path: Path) -> None:
    out = tmp_path / "a.parquet"
    import_trace("azure2023", DATA / "azure2023_7digits.csv", out, ImportOptions())
    arrival = read_trace_table(out).column(s.ARRIVAL_S).to_pylist()
    assert arrival == pytest.approx([0.0, 0.052, 1.0200401], abs=1e-12)


def test_2024_zones_and_mixed_precision(tmp_path: Path) -> None:
    out = tmp_path / "b.parquet"
    import_trace("azure2024", DATA / "azure2024_mixed_tz.csv", out, ImportOptions())
    table = read_trace_table(out)
    # row 3 is 02:00:01.5+02:00 = 00:00:01.5 UTC
    assert table.column(s.ARRIVAL_S).to_pylist() == pytest.approx(
        [0.0, 0.001163, 1.5, 2.000001], abs=1e-12
    )
    assert table.column(s.INPUT_TOKENS).to_pylist() == [2162, 2399, 100, 300]
    assert read_metadata(out)["source_time_zone"] == "UTC (converted)"


def test_2024_streams_in_small_blocks_across_batches(tmp_path: Path) -> None:
    lines = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    lines += [f"2024-05-12 00:{m // 60:02d}:{m % 60:02d}.5+00:00,{m + 1},1" for m in range(3000)]
    src = tmp_path / "week.csv"
    src.write_text("\n".join(lines) + "\n")
    from traces.importers import parse

    batches = list(parse.iter_csv(src, ["TIMESTAMP"], block_bytes=4096))
    assert len(batches) > 10
    assert batches[1].first_line == 2 + batches[0].table.num_rows
    out = tmp_path / "w.parquet"
    import_trace("azure2024", src, out, ImportOptions(end_s=100.0))
    table = read_trace_table(out)
    assert table.num_rows == 101
    assert table.column(s.ARRIVAL_S)[-1].as_py() == 100.0


def test_mixing_naive_and_zoned_times_names_the_line(tmp_path: Path) -> None:
    src = tmp_path / "mixed.csv"
    src.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2024-05-12 00:00:00+00:00,1,1\n2024-05-12 00:00:01,1,1\n"
    )
    with pytest.raises(SourceError, match=r"mixed\.csv: line 3, column 'TIMESTAMP'"):
        import_trace("azure2024", src, tmp_path / "o.parquet", ImportOptions())


@pytest.mark.parametrize(
    ("row", "column"),
    [
        ("2023-11-16 18:17:05,12a,1", "ContextTokens"),
        ("2023-11-16 18:17:05,12,", "GeneratedTokens"),
        ("yesterday,12,1", "TIMESTAMP"),
        ("2023-11-16 18:17:05,0,3", "ContextTokens"),
    ],
)
def test_malformed_cells_name_line_and_column(tmp_path: Path, row: str, column: str) -> None:
    src = tmp_path / "bad.csv"
    src.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,5,5\n{row}\n")
    with pytest.raises(SourceError, match=rf"bad\.csv: line 3, column '{column}'"):
        import_trace("azure2023", src, tmp_path / "o.parquet", ImportOptions())


def test_missing_column_is_named(tmp_path: Path) -> None:
    src = tmp_path / "cols.csv"
    src.write_text("TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:17:04,5,5\n")
    with pytest.raises(SourceError, match=r"line 1, column 'ContextTokens': missing column"):
        import_trace("azure2023", src, tmp_path / "o.parquet", ImportOptions())


def test_mm2025_synthesizes_images_deterministically(tmp_path: Path) -> None:
    out = tmp_path / "mm.parquet"
    import_trace("azure_mm2025", DATA / "azure_mm2025.csv", out, ImportOptions())
    rows = read_trace_table(out).to_pylist()
    assert [r["arrival_s"] for r in rows] == pytest.approx([0.0, 5.55, 6.244, 8.731])
    assert [len(r["images"] or []) for r in rows] == [0, 1, 1, 16]
    assert rows[3]["images"][0] == {"width": 1920, "height": 1080}
    assert [r["workload"] for r in rows] == ["text", "image", "image", "image"]
    assert all(r["api"] == s.API_CHAT for r in rows)
    assert [r["input_tokens"] for r in rows] == [770, 949, 964, 1200]
    assert rows[1]["image_tokens"] is None  # model-dependent, left to the replay
    import_trace(
        "azure_mm2025",
        DATA / "azure_mm2025.csv",
        out,
        ImportOptions(image_size=ImageSpec(width=640, height=480)),
    )
    assert read_trace_table(out).to_pylist()[1]["images"] == [{"width": 640, "height": 480}]
    assert read_metadata(out)["image_size"] == "640x480"


def test_format_specific_option_on_the_wrong_format_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(
        ImportOptionError, match="--keep-failed does not apply to format 'azure2023'"
    ):
        import_trace(
            "azure2023",
            DATA / "azure2023_7digits.csv",
            tmp_path / "o.parquet",
            ImportOptions(keep_failed=True),
        )


def test_row_with_extra_field_names_its_line(tmp_path: Path) -> None:
    src = tmp_path / "extra.csv"
    src.write_text(
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:04,5,5\n2023-11-16 18:17:05,5,5,9\n"
    )
    with pytest.raises(SourceError, match=r"extra\.csv: line 3: expected 3 fields"):
        import_trace("azure2023", src, tmp_path / "o.parquet", ImportOptions())
