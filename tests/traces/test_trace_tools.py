"""``loadgen trace info|validate|slice|scale|merge`` and the library functions behind them."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from traces import schema as s
from traces.importers.base import ImportOptions
from traces.importers.registry import import_trace
from traces.io import read_metadata, read_trace_table, write_trace
from traces.stats import trace_stats

DATA = Path(__file__).parent / "data"


def _write(
    path: Path, rows: list[dict[str, object]], provenance: dict[str, object] | None = None
) -> Path:
    schema = pa.schema([s.TRACE_SCHEMA.field(name) for name in rows[0]])
    write_trace(pa.Table.from_pylist(rows, schema=schema), path, provenance or {"source": "test"})
    return path


def _row(i: int, t: float, n_in: int, n_out: int, **extra: object) -> dict[str, object]:
    # every row names every optional column: from_pylist infers columns from the first row
    optional = dict.fromkeys(("prefix_blocks", "images", "image_tokens", "session_id"))
    base = {"request_id": str(i), "arrival_s": t, "input_tokens": n_in, "output_tokens": n_out}
    return {**base, **optional, "workload": "text", **extra}


@pytest.fixture
def small(tmp_path: Path) -> Path:
    rows = [
        _row(0, 0.0, 100, 10, workload="text", prefix_blocks=[1, 2]),
        _row(1, 1.0, 200, 20, workload="text", prefix_blocks=[1, 3]),
        _row(
            2,
            3.0,
            300,
            30,
            workload="image",
            prefix_blocks=[1, 2, 4],
            images=[{"width": 28, "height": 28}] * 2,
            image_tokens=2,
        ),
        _row(3, 6.0, 400, 40, workload="text", session_id="s"),
    ]
    return _write(tmp_path / "small.parquet", rows)


@pytest.mark.parametrize("name", ["info", "validate", "slice", "scale", "merge", "import"])
def test_help(name: str) -> None:
    result = CliRunner().invoke(cli, ["trace", name, "--help"])
    assert result.exit_code == 0
    assert "Usage:" in result.output


def test_stats_by_hand(small: Path) -> None:
    st = trace_stats(read_trace_table(small))
    gaps = [1.0, 2.0, 3.0]
    assert st.rows == 4
    assert st.duration_s == 6.0
    assert st.mean_rate_rps == pytest.approx(3 / 6)
    assert st.interarrival_cv == pytest.approx(statistics.pstdev(gaps) / statistics.mean(gaps))
    # blocks 1,2 | 1,3 | 1,2,4: 7 occurrences, 4 distinct -> 3 repeats
    assert st.prefix_blocks == 7
    assert st.prefix_reuse_ratio == pytest.approx(3 / 7)
    assert (st.images, st.image_tokens_sum) == (2, 2)
    assert st.expected_prompt_tokens == 1000 + 2
    assert [c.workload for c in st.classes] == ["image", "text"]
    text = st.classes[1]
    assert text.requests == 3
    assert text.input_tokens.p50 == 200.0
    assert text.input_tokens.p90 == pytest.approx(
        statistics.quantiles([100, 200, 400], n=10, method="inclusive")[8]
    )
    assert st.overall.output_tokens.max == 40
    assert st.sessions == 1


def test_info_text_and_json(small: Path) -> None:
    result = CliRunner().invoke(cli, ["trace", "info", str(small)])
    assert result.exit_code == 0, result.output
    assert "requests         4" in result.output
    assert "reuse ratio 0.4286" in result.output
    data = json.loads(CliRunner().invoke(cli, ["trace", "info", str(small), "--json"]).output)
    assert data["rows"] == 4
    assert data["provenance"]["source"] == "test"
    assert {c["workload"] for c in data["classes"]} == {"image", "text"}


def test_validate_ok_and_bad(small: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["trace", "validate", str(small)])
    assert (result.exit_code, result.output.strip()) == (0, "ok: 4 requests")
    bad = tmp_path / "bad.parquet"
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist([_row(0, 1.0, 5, 5), _row(1, 0.5, 5, 5)]), bad)
    result = CliRunner().invoke(cli, ["trace", "validate", str(bad)])
    assert result.exit_code == 2
    assert "row 1, column 'arrival_s'" in result.output
    missing = CliRunner().invoke(cli, ["trace", "validate", str(tmp_path / "none.parquet")])
    assert missing.exit_code == 2
    assert missing.output.startswith("error: ")


def test_slice_window_class_first_and_rezero(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "s.parquet"
    args = ["trace", "slice", str(small), "-o", str(out)]
    result = CliRunner().invoke(cli, [*args, "--start", "1", "--end", "6", "--rezero"])
    assert result.exit_code == 0, result.output
    table = read_trace_table(out)
    assert table.column(s.ARRIVAL_S).to_pylist() == [0.0, 2.0]
    meta = read_metadata(out)
    assert meta["source"] == "test"
    assert meta["transforms"][0]["op"] == "slice"
    assert meta["transforms"][0]["start_s"] == 1.0
    CliRunner().invoke(cli, [*args, "--workload", "text", "--first", "2"])
    assert read_trace_table(out).column(s.REQUEST_ID).to_pylist() == ["0", "1"]
    empty = CliRunner().invoke(cli, [*args, "--workload", "video"])
    assert empty.exit_code == 2
    assert "slice is empty" in empty.output


def test_scale_keeps_burstiness(small: Path, tmp_path: Path) -> None:
    out = tmp_path / "x.parquet"
    result = CliRunner().invoke(
        cli, ["trace", "scale", str(small), "-o", str(out), "--rate", "1.5"]
    )
    assert result.exit_code == 0, result.output
    before, after = trace_stats(read_trace_table(small)), trace_stats(read_trace_table(out))
    assert after.mean_rate_rps == pytest.approx(1.5)
    assert after.interarrival_cv == pytest.approx(before.interarrival_cv)
    assert read_metadata(out)["transforms"][-1]["factor"] == pytest.approx(1 / 3)
    CliRunner().invoke(cli, ["trace", "scale", str(small), "-o", str(out), "--time-scale", "2"])
    assert read_trace_table(out).column(s.ARRIVAL_S).to_pylist() == [0.0, 2.0, 6.0, 12.0]
    both = CliRunner().invoke(cli, ["trace", "scale", str(small), "-o", str(out)])
    assert both.exit_code == 2
    assert "exactly one of" in both.output


def test_merge_orders_prefixes_colliding_ids_and_separates_blocks(
    small: Path, tmp_path: Path
) -> None:
    other = _write(
        tmp_path / "other.parquet",
        [_row(0, 0.5, 7, 7, prefix_blocks=[1]), _row(9, 2.0, 8, 8, session_id="s")],
        {"source": "other"},
    )
    out = tmp_path / "m.parquet"
    result = CliRunner().invoke(cli, ["trace", "merge", str(small), str(other), "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = read_trace_table(out).to_pylist()
    assert [r["arrival_s"] for r in rows] == [0.0, 0.5, 1.0, 2.0, 3.0, 6.0]
    assert [r["request_id"] for r in rows][:2] == ["small/0", "other/0"]
    assert rows[3]["session_id"] == "other/s"
    assert rows[1]["prefix_blocks"] == [6]  # 1 shifted by (small's max block id 4) + 1
    meta = read_metadata(out)
    assert [src["source"] for src in meta["sources"]] == ["test", "other"]
    assert meta["transforms"][0]["op"] == "merge"


def test_merge_keeps_ids_without_collision(small: Path, tmp_path: Path) -> None:
    other = _write(tmp_path / "o.parquet", [_row(42, 0.5, 7, 7)])
    out = tmp_path / "m.parquet"
    CliRunner().invoke(cli, ["trace", "merge", str(small), str(other), "-o", str(out)])
    assert "42" in read_trace_table(out).column(s.REQUEST_ID).to_pylist()


def test_info_on_imported_trace_keeps_import_provenance(tmp_path: Path) -> None:
    out = tmp_path / "mc.parquet"
    import_trace("mooncake", DATA / "mooncake_pitfalls.jsonl", out, ImportOptions())
    sliced = tmp_path / "sl.parquet"
    CliRunner().invoke(cli, ["trace", "slice", str(out), "-o", str(sliced), "--first", "2"])
    meta = read_metadata(sliced)
    assert meta["source_format"] == "mooncake"
    assert meta["block_size"] == 512
    data = json.loads(CliRunner().invoke(cli, ["trace", "info", str(out), "--json"]).output)
    assert data["prefix_reuse_ratio"] == pytest.approx((379 - 374) / 379)
