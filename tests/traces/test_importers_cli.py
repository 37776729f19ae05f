"""``loadgen trace import`` through the root CLI (click.testing.CliRunner)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from traces.importers.registry import REGISTRY
from traces.io import read_metadata, read_trace_table

DATA = Path(__file__).parent / "data"
FIXTURES = {
    "mooncake": DATA / "mooncake_pitfalls.jsonl",
    "azure2023": DATA / "azure2023_7digits.csv",
    "azure2024": DATA / "azure2024_mixed_tz.csv",
    "azure_mm2025": DATA / "azure_mm2025.csv",
    "burstgpt": DATA / "burstgpt_v3.csv",
    "sharegpt": DATA / "sharegpt.json",
    "splitwise": DATA / "splitwise.csv",
    "servegen": DATA / "servegen_tiny",
    "dataset": DATA / "dataset_qa.jsonl",
    "aiperf": DATA / "aiperf_custom.jsonl",
    "aiperf_dag": DATA / "aiperf_dag.jsonl",
}
EXTRA_ARGS = {"dataset": ["--map", "prompt=q,output=a"]}


def test_every_registered_format_has_a_fixture() -> None:
    assert set(FIXTURES) == set(REGISTRY)


def test_import_help_lists_formats() -> None:
    result = CliRunner().invoke(cli, ["trace", "import", "--help"])
    assert result.exit_code == 0
    for name in REGISTRY:
        assert name in result.output


@pytest.mark.parametrize("fmt", sorted(FIXTURES))
def test_import_each_format(tmp_path: Path, fmt: str) -> None:
    out = tmp_path / "t.parquet"
    args = ["trace", "import", fmt, str(FIXTURES[fmt]), *EXTRA_ARGS.get(fmt, []), "-o", str(out)]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    assert result.output.startswith("imported ")
    assert read_trace_table(out).num_rows > 0
    assert read_metadata(out)["source_format"] == fmt


def test_missing_file_is_exit_2_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        cli,
        [
            "trace",
            "import",
            "mooncake",
            str(tmp_path / "nope.jsonl"),
            "-o",
            str(tmp_path / "o.parquet"),
        ],
    )
    assert result.exit_code == 2
    assert result.output.strip().count("\n") == 0
    assert result.output.startswith("error: ")
    assert "no such file" in result.output


def test_malformed_file_is_exit_2_naming_row_and_column(tmp_path: Path) -> None:
    src = tmp_path / "bad.csv"
    src.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:04,5,x\n")
    result = CliRunner().invoke(
        cli, ["trace", "import", "azure2023", str(src), "-o", str(tmp_path / "o.parquet")]
    )
    assert result.exit_code == 2
    assert (
        result.output.strip()
        == "error: bad.csv: line 2, column 'GeneratedTokens': not an integer: 'x'"
    )


def test_options_reach_the_importer(tmp_path: Path) -> None:
    out = tmp_path / "o.parquet"
    args = ["trace", "import", "burstgpt", str(DATA / "burstgpt_v1.csv"), "-o", str(out)]
    result = CliRunner().invoke(cli, [*args, "--keep-failed", "--limit", "3", "--workload", "chat"])
    assert result.exit_code == 0, result.output
    table = read_trace_table(out)
    assert table.num_rows == 3
    assert read_metadata(out)["import_options"] == {
        "keep_failed": True,
        "limit": 3,
        "workload": "chat",
    }
    bad = CliRunner().invoke(cli, [*args, "--rate", "3"])
    assert bad.exit_code == 2
    assert "error: option --rate does not apply to format 'burstgpt'" in bad.output
    bad = CliRunner().invoke(
        cli,
        [
            "trace",
            "import",
            "azure_mm2025",
            str(DATA / "azure_mm2025.csv"),
            "-o",
            str(out),
            "--image-size",
            "big",
        ],
    )
    assert bad.exit_code == 2
    assert "WIDTHxHEIGHT" in bad.output
