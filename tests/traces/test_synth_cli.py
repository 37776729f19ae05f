"""``loadgen trace synth`` through the root command: every option, help, bad input."""

from __future__ import annotations

import itertools
import math
import statistics
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from traces import schema as s
from traces.io import read_metadata

Rows = list[dict[str, Any]]


def _synth(tmp_path: Path, *args: str, name: str = "t.parquet") -> tuple[Rows, dict[str, Any]]:
    out = tmp_path / name
    result = CliRunner().invoke(cli, ["trace", "synth", *args, "-o", str(out)])
    assert result.exit_code == 0, result.output
    assert f"wrote {out}" in result.output
    return pq.read_table(out).to_pylist(), read_metadata(out)


def _col(rows: Rows, name: str) -> list[Any]:
    return [r[name] for r in rows]


def test_demo_command_line(tmp_path: Path) -> None:
    rows, meta = _synth(tmp_path, "--requests", "200", "--rate", "5", "--seed", "1")
    assert len(rows) == 200
    assert set(_col(rows, s.WORKLOAD)) == {"text"}
    assert meta["seed"] == 1
    assert meta["block_size"] == 512


def test_same_seed_same_bytes_through_cli(tmp_path: Path) -> None:
    args = ["--requests", "300", "--mix", "text=0.5,image=0.5", "--seed", "9"]
    _synth(tmp_path, *args, name="a.parquet")
    _synth(tmp_path, *args, name="b.parquet")
    assert (tmp_path / "a.parquet").read_bytes() == (tmp_path / "b.parquet").read_bytes()


def test_help_lists_options() -> None:
    result = CliRunner().invoke(cli, ["trace", "synth", "--help"])
    assert result.exit_code == 0
    for flag in ("--requests", "--arrival", "--mix", "--prefix-groups", "--sessions", "--seed"):
        assert flag in result.output


def _rate(rows: Rows) -> float:
    return len(rows) / float(max(_col(rows, s.ARRIVAL_S)))


def _gap_cv(rows: Rows) -> float:
    t = [0.0, *_col(rows, s.ARRIVAL_S)]
    gaps = [b - a for a, b in itertools.pairwise(t)]
    return float(statistics.pstdev(gaps) / statistics.fmean(gaps))


Check = Callable[[Rows], bool]

CASES: list[tuple[list[str], Check]] = [
    (["--requests", "2000", "--rate", "20"], lambda r: abs(_rate(r) / 20 - 1) < 0.08),
    (["--duration", "50", "--rate", "10"], lambda r: max(_col(r, s.ARRIVAL_S)) <= 50),
    (
        ["--requests", "3000", "--arrival", "gamma", "--cv", "3"],
        lambda r: abs(_gap_cv(r) / 3 - 1) < 0.12,
    ),
    (["--requests", "50", "--arrival", "constant", "--rate", "2"], lambda r: _gap_cv(r) < 1e-6),
    (
        ["--duration", "100", "--arrival", "ramp", "--rate-from", "1", "--rate-to", "39"],
        lambda r: abs(len(r) - 2000) < 200,
    ),
    (
        ["--requests", "1000", "--arrival", "ramp", "--rate-from", "0", "--rate-to", "20"],
        lambda r: abs(max(_col(r, s.ARRIVAL_S)) - 100) < 10,
    ),
    (
        ["--duration", "20", "--arrival", "steps", "--steps", "10:0,10:30"],
        lambda r: min(_col(r, s.ARRIVAL_S)) >= 10,
    ),
    (
        ["--duration", "400", "--arrival", "diurnal", "--period", "200", "--amplitude", "0.9"],
        lambda r: sum(t % 200 < 100 for t in _col(r, s.ARRIVAL_S)) > 0.75 * len(r),
    ),
    (
        [
            "--duration",
            "600",
            "--arrival",
            "bursts",
            "--rate",
            "1",
            "--burst-factor",
            "20",
            "--burst-length",
            "5",
            "--burst-every",
            "30",
        ],
        lambda r: sum(t % 30 < 5 for t in _col(r, s.ARRIVAL_S)) > 0.6 * len(r),
    ),
    (["--requests", "300", "--input-fixed", "77"], lambda r: set(_col(r, s.INPUT_TOKENS)) == {77}),
    (
        ["--requests", "4000", "--input-mean", "300", "--input-sigma", "0.5"],
        lambda r: abs(statistics.fmean(_col(r, s.INPUT_TOKENS)) / 300 - 1) < 0.05,
    ),
    (
        ["--requests", "300", "--input-sigma", "0"],
        lambda r: set(_col(r, s.INPUT_TOKENS)) == {1000},
    ),
    (
        ["--requests", "300", "--input-from", "5,6"],
        lambda r: set(_col(r, s.INPUT_TOKENS)) == {5, 6},
    ),
    (
        ["--requests", "300", "--output-fixed", "9"],
        lambda r: set(_col(r, s.OUTPUT_TOKENS)) == {9},
    ),
    (
        ["--requests", "4000", "--output-mean", "40", "--output-sigma", "0.3"],
        lambda r: abs(statistics.fmean(_col(r, s.OUTPUT_TOKENS)) / 40 - 1) < 0.05,
    ),
    (
        ["--requests", "300", "--output-from", "3,4"],
        lambda r: set(_col(r, s.OUTPUT_TOKENS)) == {3, 4},
    ),
    (
        ["--requests", "2000", "--mix", "text=0.5,long_context=0.25,image=0.25"],
        lambda r: abs(Counter(_col(r, s.WORKLOAD))["text"] - 1000) < 100,
    ),
    (
        [
            "--requests",
            "100",
            "--mix",
            "long_context=1",
            "--long-min",
            "40000",
            "--long-max",
            "50000",
        ],
        lambda r: all(40000 <= x <= 50000 for x in _col(r, s.INPUT_TOKENS)),
    ),
    (
        ["--requests", "300", "--mix", "image=1", "--images-max", "3"],
        lambda r: {len(x) for x in _col(r, s.IMAGES)} == {1, 2, 3},
    ),
    (
        ["--requests", "50", "--mix", "image=1", "--image-model", "gemma3"],
        lambda r: all(
            t == 256 * len(im)
            for t, im in zip(_col(r, s.IMAGE_TOKENS), _col(r, s.IMAGES), strict=True)
        ),
    ),
    (
        ["--requests", "500", "--prefix-groups", "3", "--prefix-tokens", "1024"],
        lambda r: {tuple(b[:2]) for b in _col(r, s.PREFIX_BLOCKS)} == {(0, 1), (2, 3), (4, 5)},
    ),
    (
        ["--requests", "3000", "--prefix-groups", "2", "--zipf-s", "0"],
        lambda r: abs(Counter(b[0] for b in _col(r, s.PREFIX_BLOCKS))[0] - 1500) < 150,
    ),
    (
        ["--requests", "2000", "--prefix-groups", "1", "--prefix-fraction", "0.25"],
        lambda r: abs(sum(b[0] == 0 for b in _col(r, s.PREFIX_BLOCKS)) - 500) < 75,
    ),
    (
        ["--requests", "50", "--api", "completions"],
        lambda r: set(_col(r, s.API)) == {"completions"},
    ),
    (
        ["--requests", "400", "--api", "mixed"],
        lambda r: set(_col(r, s.API)) == {"chat", "completions"},
    ),
    (
        ["--requests", "20", "--api", "embeddings"],
        lambda r: set(_col(r, s.API)) == {"embeddings"},
    ),
    (
        ["--requests", "500", "--sessions", "--turns-mean", "3", "--think-mean", "2"],
        lambda r: max(_col(r, s.TURN)) > 1 and None not in _col(r, s.SESSION_ID),
    ),
    (
        ["--requests", "100", "--slo-ttft-ms", "800", "--slo-tpot-ms", "text=40"],
        lambda r: set(_col(r, s.SLO_TTFT_MS)) == {800.0} and set(_col(r, s.SLO_TPOT_MS)) == {40.0},
    ),
    (
        ["--requests", "200", "--block-size", "64"],
        lambda r: all(
            len(b) == math.ceil(n / 64)
            for b, n in zip(_col(r, s.PREFIX_BLOCKS), _col(r, s.INPUT_TOKENS), strict=True)
        ),
    ),
]


@pytest.mark.parametrize(("args", "check"), CASES, ids=[" ".join(a) for a, _ in CASES])
def test_option(tmp_path: Path, args: list[str], check: Check) -> None:
    rows, _ = _synth(tmp_path, *args)
    assert check(rows)


def test_sessions_options_change_the_shape(tmp_path: Path) -> None:
    short, _ = _synth(tmp_path, "--requests", "400", "--sessions", "--turns-mean", "1", name="a")
    assert set(_col(short, s.TURN)) == {1}
    slow, _ = _synth(
        tmp_path, "--requests", "400", "--sessions", "--think-mean", "100", name="b.parquet"
    )
    fast, _ = _synth(tmp_path, "--requests", "400", "--sessions", "--think-mean", "1", name="c")
    assert max(_col(slow, s.ARRIVAL_S)) > max(_col(fast, s.ARRIVAL_S))


def test_seed_changes_the_trace(tmp_path: Path) -> None:
    a, _ = _synth(tmp_path, "--requests", "20", "--seed", "1", name="a.parquet")
    b, _ = _synth(tmp_path, "--requests", "20", "--seed", "2", name="b.parquet")
    assert _col(a, s.ARRIVAL_S) != _col(b, s.ARRIVAL_S)


def test_input_from_trace_file(tmp_path: Path) -> None:
    src, _ = _synth(
        tmp_path,
        "--requests",
        "50",
        "--input-fixed",
        "123",
        "--output-fixed",
        "7",
        name="src.parquet",
    )
    assert src
    rows, _ = _synth(
        tmp_path,
        "--requests",
        "30",
        "--input-from",
        str(tmp_path / "src.parquet"),
        "--output-from",
        str(tmp_path / "src.parquet"),
    )
    assert set(_col(rows, s.INPUT_TOKENS)) == {123}
    assert set(_col(rows, s.OUTPUT_TOKENS)) == {7}


BAD: list[list[str]] = [
    [],
    ["--requests", "0"],
    ["--requests", "x"],
    ["--duration", "0"],
    ["--requests", "5", "--rate", "0"],
    ["--requests", "5", "--rate", "-2"],
    ["--requests", "5", "--arrival", "weibull"],
    ["--requests", "5", "--cv", "2"],
    ["--requests", "5", "--arrival", "gamma", "--cv", "0"],
    ["--requests", "5", "--rate-from", "2"],
    ["--requests", "5", "--arrival", "ramp", "--rate-to", "0"],
    ["--requests", "5", "--arrival", "steps"],
    ["--requests", "5", "--arrival", "steps", "--steps", "10"],
    ["--requests", "5", "--arrival", "steps", "--steps", "10:1,5:0"],
    ["--requests", "5", "--arrival", "steps", "--steps", "0:1"],
    ["--requests", "5", "--arrival", "diurnal", "--amplitude", "1"],
    ["--requests", "5", "--arrival", "diurnal", "--period", "0"],
    ["--requests", "5", "--period", "60"],
    ["--requests", "5", "--arrival", "bursts", "--burst-length", "60", "--burst-every", "60"],
    ["--requests", "5", "--arrival", "bursts", "--burst-factor", "0"],
    ["--requests", "5", "--burst-every", "9"],
    ["--requests", "5", "--input-mean", "0"],
    ["--requests", "5", "--input-sigma", "-1"],
    ["--requests", "5", "--input-fixed", "0"],
    ["--requests", "5", "--input-fixed", "5", "--input-mean", "9"],
    ["--requests", "5", "--input-from", "1,x"],
    ["--requests", "5", "--input-from", "missing.parquet"],
    ["--requests", "5", "--output-fixed", "3", "--output-from", "1,2"],
    ["--requests", "5", "--output-mean", "-4"],
    ["--requests", "5", "--mix", "video=1"],
    ["--requests", "5", "--mix", "text=0"],
    ["--requests", "5", "--long-min", "10", "--long-max", "5"],
    ["--requests", "5", "--images-max", "0"],
    ["--requests", "5", "--image-model", "dalle"],
    ["--requests", "5", "--prefix-groups", "0"],
    ["--requests", "5", "--prefix-tokens", "100"],
    ["--requests", "5", "--prefix-groups", "2", "--prefix-fraction", "1.5"],
    ["--requests", "5", "--prefix-groups", "2", "--zipf-s", "-1"],
    ["--requests", "5", "--api", "grpc"],
    ["--requests", "5", "--turns-mean", "3"],
    ["--requests", "5", "--sessions", "--turns-mean", "0.5"],
    ["--requests", "5", "--sessions", "--think-mean", "-1"],
    ["--requests", "5", "--slo-ttft-ms", "0"],
    ["--requests", "5", "--slo-tpot-ms", "video=3"],
    ["--requests", "5", "--block-size", "0"],
    ["--requests", "5", "--seed", "-1"],
    ["--duration", "0.001", "--rate", "0.001"],
]


@pytest.mark.parametrize("args", BAD, ids=[" ".join(a) or "no-bound" for a in BAD])
def test_bad_input_exits_2(tmp_path: Path, args: list[str]) -> None:
    result = CliRunner().invoke(cli, ["trace", "synth", *args, "-o", str(tmp_path / "x.parquet")])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    errors = [line for line in result.output.splitlines() if line.lower().startswith("error")]
    assert len(errors) == 1
    assert not (tmp_path / "x.parquet").exists()


def test_missing_output_exits_2() -> None:
    result = CliRunner().invoke(cli, ["trace", "synth", "--requests", "5"])
    assert result.exit_code == 2
