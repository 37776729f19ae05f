"""ServeGen importer: the real multimodal client sample and a hand-written tiny client.

Expected values come from the raw files (parsed here with csv and ast.literal_eval), so the
test checks that sampling reproduces the published statistics, not the importer's output.
"""

from __future__ import annotations

import ast
import csv
import json
from pathlib import Path

import pyarrow.compute as pc
import pytest

from traces import schema as s
from traces.importers.base import ImportOptions
from traces.importers.errors import SourceError
from traces.importers.registry import import_trace
from traces.importers.servegen import qwen_image_size
from traces.io import read_metadata, read_trace_table

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "../shared/traces-samples"
DATA = Path(__file__).parent / "data"
needs_samples = pytest.mark.skipif(
    not SAMPLES.is_dir(), reason=f"real trace samples absent: {SAMPLES} (needs ../shared)"
)


def _pmf_mean(text: str) -> float:
    pmf = ast.literal_eval(text)
    return float(sum(k * p for k, p in pmf.items()) / sum(pmf.values()))


@needs_samples
def test_real_mm_image_client_reproduces_rates_and_pmfs(tmp_path: Path) -> None:
    src = SAMPLES / "servegen_mm_image/chunk-0-trace.csv"
    with src.open() as fh:
        windows = [(float(r[0]), float(r[1])) for r in csv.reader(fh)]
    expected_rows = sum(rate * 600 for _, rate in windows)
    dataset = json.loads((SAMPLES / "servegen_mm_image/chunk-0-dataset.json").read_text())
    first = dataset["0"]

    out = tmp_path / "sg.parquet"
    # start at 0 s keeps the source time axis (window starts) in arrival_s
    import_trace("servegen", src, out, ImportOptions(start_s=0.0, seed=1))
    table = read_trace_table(out)
    assert table.num_rows == pytest.approx(expected_rows, rel=0.03)

    busiest = max(windows, key=lambda w: w[1])
    arrival = table.column(s.ARRIVAL_S)
    in_busiest = pc.and_(pc.greater_equal(arrival, busiest[0]), pc.less(arrival, busiest[0] + 600))
    assert pc.sum(pc.cast(in_busiest, "int64")).as_py() == pytest.approx(busiest[1] * 600, rel=0.2)

    head = table.filter(pc.less(arrival, 21_600))
    assert pc.mean(head.column(s.INPUT_TOKENS)).as_py() == pytest.approx(
        _pmf_mean(first["text_tokens"]), rel=0.02
    )
    assert pc.mean(head.column(s.OUTPUT_TOKENS)).as_py() == pytest.approx(
        _pmf_mean(first["output_tokens"]), rel=0.03
    )
    assert pc.mean(head.column(s.IMAGE_TOKENS)).as_py() == pytest.approx(
        _pmf_mean(first["image_tokens"]) * _pmf_mean(first["image_count"]), rel=0.01
    )
    # every image is an exact Qwen2-VL grid: (w/28)*(h/28) tokens, matching image_tokens
    for row in head.slice(0, 200).to_pylist():
        assert sum(i["width"] * i["height"] // 784 for i in row["images"]) == row["image_tokens"]
    assert read_metadata(out)["servegen_clients"] == ["0"]


def test_tiny_client_windows_images_and_determinism(tmp_path: Path) -> None:
    src = DATA / "servegen_tiny/chunk-7-trace.csv"
    out = tmp_path / "t.parquet"
    import_trace("servegen", src, out, ImportOptions(start_s=0.0, seed=5))
    table = read_trace_table(out)
    rows = table.to_pylist()
    first_window = [r for r in rows if r["arrival_s"] < 600]
    assert len(first_window) == pytest.approx(1200, rel=0.1)  # 2 req/s x 600 s
    assert not [r for r in rows if 600 <= r["arrival_s"] < 1200]  # idle window
    assert all(r["images"] == [{"width": 84, "height": 56}] * 2 for r in first_window)
    assert all(r["image_tokens"] == 12 and r["workload"] == "image" for r in first_window)
    assert {r["input_tokens"] for r in first_window} == {10, 20}
    late = [r for r in rows if r["arrival_s"] >= 1200]  # dataset window "1000" applies
    assert {r["input_tokens"] for r in late} == {30}
    assert {r["workload"] for r in late} == {"image", "text"}
    again = tmp_path / "u.parquet"
    import_trace("servegen", DATA / "servegen_tiny", again, ImportOptions(start_s=0.0, seed=5))
    assert read_trace_table(again).equals(table)


def test_qwen_image_size_round_trips_token_counts() -> None:
    assert qwen_image_size(1222) == (1316, 728)  # reference: 1920x1080 -> 728x1316 grid
    for tokens in (4, 6, 525, 1196, 1230, 1280):
        w, h = qwen_image_size(tokens)
        assert (w // 28) * (h // 28) == tokens


def test_pmf_is_never_evaluated(tmp_path: Path) -> None:
    (tmp_path / "chunk-1-trace.csv").write_text("0,1.0,1.0,Gamma,1.0,1.0\n")
    (tmp_path / "chunk-1-dataset.json").write_text(
        json.dumps(
            {"0": {"input_tokens": "__import__('os').system('false')", "output_tokens": "{1: 1}"}}
        )
    )
    with pytest.raises(SourceError, match=r"column '0\.input_tokens': not a Python dict literal"):
        import_trace(
            "servegen", tmp_path / "chunk-1-trace.csv", tmp_path / "o.parquet", ImportOptions()
        )


def test_bad_trace_cell_names_line_and_column(tmp_path: Path) -> None:
    (tmp_path / "chunk-2-trace.csv").write_text("0,1.0,1.0,Gamma,1.0,1.0\n600,fast,1.0,Gamma,1,1\n")
    (tmp_path / "chunk-2-dataset.json").write_text(
        json.dumps({"0": {"input_tokens": "{5: 1}", "output_tokens": "{1: 1}"}})
    )
    with pytest.raises(SourceError, match=r"chunk-2-trace\.csv: line 2, column 'rate_rps'"):
        import_trace(
            "servegen", tmp_path / "chunk-2-trace.csv", tmp_path / "o.parquet", ImportOptions()
        )


def _write_client(folder: Path, client: str, rows: list[str], dataset: object) -> Path:
    trace = folder / f"chunk-{client}-trace.csv"
    trace.write_text("".join(f"{r}\n" for r in rows))
    (folder / f"chunk-{client}-dataset.json").write_text(json.dumps(dataset))
    return trace


def _expected_requests(trace: Path) -> float:
    with trace.open() as fh:
        return sum(float(r[1]) * 600 for r in csv.reader(fh))


def test_reasoning_client_with_reason_ratio_imports(tmp_path: Path) -> None:
    # shaped as data/reason/deepseek-r1: input/output pmfs plus reason_ratio over fractions,
    # a field the importer does not sample (it used to reject the file: "bad entry 0.35")
    fields = {
        "input_tokens": "{100: 0.5, 300: 0.5}",
        "output_tokens": "{2000: 1.0}",
        "reason_ratio": "{0.35: 0.25, 0.8: 0.75}",
    }
    trace = _write_client(
        tmp_path,
        "0",
        ["0,1.5,1.0,Gamma,1.0,1.0", "600,0,0,,0,0", "1200,2.5,0.9,Weibull,1.1,1.0"],
        {"0": fields},
    )
    out = tmp_path / "r.parquet"
    import_trace("servegen", trace, out, ImportOptions(start_s=0.0, seed=2))
    rows = read_trace_table(out).to_pylist()
    assert len(rows) == pytest.approx(_expected_requests(trace), rel=0.06)  # 2,400
    assert {r["input_tokens"] for r in rows} == {100, 300}
    assert {r["output_tokens"] for r in rows} == {2000}
    assert not [r for r in rows if 600 <= r["arrival_s"] < 1200]


def test_idle_windows_are_zero_requests(tmp_path: Path) -> None:
    # shaped as data/language/m-large chunk-11: most dataset windows are `{}` or empty pmfs,
    # and idle arrival windows have rate 0 and no pattern
    busy = {"input_tokens": "{50: 1.0}", "output_tokens": "{9: 1.0}"}
    dataset = {
        "0": {},
        "21600": {"input_tokens": "{}", "output_tokens": "{}", "reason_ratio": "{}"},
        "43200": busy,
        "64800": {},
    }
    rows_csv = [f"{t},0,0,,0,0" for t in range(0, 43200, 600)]
    rows_csv += ["43200,2.0,1.0,Gamma,1.0,1.0", "43800,0,0,,0,0"]
    # traffic while the dataset window is idle borrows the nearest busy one's lengths
    rows_csv += ["64800,1.0,1.0,Gamma,1.0,1.0"]
    trace = _write_client(tmp_path, "11", rows_csv, dataset)
    out = tmp_path / "i.parquet"
    import_trace("servegen", trace, out, ImportOptions(start_s=0.0, seed=4))
    rows = read_trace_table(out).to_pylist()
    assert len(rows) == pytest.approx(_expected_requests(trace), rel=0.06)  # 1,800
    assert min(r["arrival_s"] for r in rows) >= 43200
    assert not [r for r in rows if 43800 <= r["arrival_s"] < 64800]
    assert {(r["input_tokens"], r["output_tokens"]) for r in rows} == {(50, 9)}


def test_traffic_without_any_busy_dataset_window_is_an_error(tmp_path: Path) -> None:
    trace = _write_client(tmp_path, "3", ["0,1.0,1.0,Gamma,1.0,1.0"], {"0": {}})
    with pytest.raises(SourceError, match=r"line 1, column 'rate_rps'.*every dataset window"):
        import_trace("servegen", trace, tmp_path / "o.parquet", ImportOptions())


def test_empty_pmf_in_a_busy_window_names_the_field(tmp_path: Path) -> None:
    dataset = {"0": {"input_tokens": "{5: 1.0}", "output_tokens": "{}"}}
    trace = _write_client(tmp_path, "4", ["0,1.0,1.0,Gamma,1.0,1.0"], dataset)
    with pytest.raises(SourceError, match=r"column '0\.output_tokens': empty pmf"):
        import_trace("servegen", trace, tmp_path / "o.parquet", ImportOptions())
