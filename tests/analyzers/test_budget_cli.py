"""``loadgen plan`` and ``loadgen plan check-claim`` through the root CLI; the budget file."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pytest
from click.testing import CliRunner

from analyzers.budget import load_budget
from analyzers.errors import BudgetError
from loadgen.cli.root import cli
from traces.io import write_trace

SEED = ["plan", "--model", "llama-3.3-70b", "--gpu", "h200", "--gpus", "1", "--dtype", "fp8"]
SEED_EFF = ["--efficiency-prefill", str(1.2e15 / 1979e12)]


def run(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("args", [["plan", "--help"], ["plan", "check-claim", "--help"]])
def test_help(args: list[str]) -> None:
    code, out, _ = run(args)
    assert code == 0
    assert "--model" in out


def test_plan_help_lists_its_options_and_subcommand() -> None:
    _, out, _ = run(["plan", "--help"])
    for opt in ("--efficiency-prefill", "--efficiency-decode", "--catalog", "--json", "--out",
                "--trace", "--slo-ttft-ms", "--prompt-tokens", "check-claim"):  # fmt: skip
        assert opt in out


def test_seed_numbers_come_out_of_plan() -> None:
    code, out, _ = run([*SEED, *SEED_EFF, "--prompt-tokens", "4000"])
    assert code == 0, out
    assert "2 x 70.55e9 x 4000 / 1.2e15 = 0.47 s" in out
    assert "327,680 B x 131072 = 42.95 GB (40 GiB)" in out
    assert "70.55 GB / (1 x 4.8e12 B/s) = 14.7 ms" in out
    assert "1.311 GB / 50e9 B/s = 26.2 ms" in out
    assert "42.95 GB / 12.5e9 B/s = 3.44 s" in out


def test_deepseek_mla_in_plan() -> None:
    code, out, _ = run(["plan", "--model", "DeepSeek-V3", "--gpu", "H200", "--gpus", "8",
                        "--dtype", "fp8"])  # fmt: skip
    assert code == 0
    assert "61 layers x (512 latent + 64 rope) x 2 B = 70,272 B" in out


def test_unknown_model_is_one_line_exit_2() -> None:
    code, _, err = run(["plan", "--model", "gpt-9", "--gpu", "h100"])
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: unknown model 'gpt-9'; known: ")
    assert "llama-3.3-70b" in lines[0]


def test_missing_model_is_a_usage_error() -> None:
    code, _, err = run(["plan", "--gpu", "h100"])
    assert code == 2
    assert "--model" in err


def test_out_toml_and_json_round_trip(tmp_path: Path) -> None:
    toml_path, json_path = tmp_path / "budget.toml", tmp_path / "budget.json"
    args = [*SEED, *SEED_EFF, "--slo-ttft-ms", "200"]
    assert run([*args, "--out", str(toml_path)])[0] == 0
    code, out, _ = run([*args, "--json", "--out", str(json_path)])
    assert code == 0
    printed = json.loads(out)
    assert printed["model"]["name"] == "llama-3.3-70b"
    for path in (toml_path, json_path):
        report = load_budget(path)
        assert report.model.weight_dtype == "fp8"
        assert report.deployment.hardware.name == "h200"
        assert report.inputs.slo_ttft_ms == 200
        assert report.value("prefill_linear_s") == pytest.approx(0.4703, abs=1e-4)
        assert report.value("kv_bytes_max_context") == 42_949_672_960
        assert report.value("max_prompt_tokens_for_ttft") > 0
        assert math.isinf(report.value("disagg_break_even_rate_per_s"))
    assert load_budget(toml_path) == load_budget(json_path)


def test_load_budget_rejects_garbage(tmp_path: Path) -> None:
    bad = tmp_path / "b.toml"
    bad.write_text("[model]\nname = 'x'\n", encoding="utf-8")
    with pytest.raises(BudgetError, match="not a budget file"):
        load_budget(bad)
    with pytest.raises(BudgetError, match="cannot read"):
        load_budget(tmp_path / "missing.toml")


def test_plan_with_trace_and_user_catalog(tmp_path: Path) -> None:
    trace = tmp_path / "t.parquet"
    table = pa.table(
        {
            "request_id": ["a", "b", "c"],
            "arrival_s": [0.0, 0.5, 1.0],
            "input_tokens": pa.array([1000, 2000, 3000], pa.int32()),
            "output_tokens": pa.array([100, 200, 300], pa.int32()),
        }
    )
    write_trace(table, trace)
    user = tmp_path / "user.toml"
    user.write_text(
        '[links.slow]\nsource = "test"\nbandwidth_bytes_per_s = 1e9\n', encoding="utf-8"
    )
    code, out, err = run(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--trace",
                          str(trace), "--catalog", str(user), "--link", "slow"])  # fmt: skip
    assert code == 0, err
    assert f"trace {trace}" in out
    assert "slow" in out


def test_vision_model_plan_shows_images() -> None:
    code, out, _ = run(["plan", "--model", "qwen2.5-vl-72b", "--gpu", "h200", "--gpus", "2",
                        "--image", "1920x1080"])  # fmt: skip
    assert code == 0
    assert "1222 tokens" in out
    code, _, err = run(["plan", "--model", "qwen2.5-vl-72b", "--gpu", "h200", "--image", "big"])
    assert code == 2
    assert "WIDTHxHEIGHT" in err


def test_fp8_on_a100_is_a_user_error() -> None:
    code, _, err = run(["plan", "--model", "llama-3.1-8b", "--gpu", "a100", "--dtype", "fp8"])
    assert code == 2
    assert "no FP8" in err


def test_check_claim_rejects_above_compute_peak() -> None:
    args = ["--dtype", "bf16", "--phase", "input", "--tokens-per-s", "8000"]
    code, out, _ = run(["plan", "check-claim", "--model", "llama-3.3-70b", "--gpu", "h100", *args])
    assert code == 1
    assert "IMPOSSIBLE" in out
    assert "exceeds the compute bound of 7012 tokens/s" in out


def test_check_claim_passes_a_routine_one() -> None:
    code, out, _ = run(["plan", "check-claim", "--model", "llama-3.1-8b", "--gpu", "h100",
                        "--tokens-per-s", "5000", "--json"])  # fmt: skip
    assert code == 0
    data = json.loads(out)
    assert data["possible"] is True
    assert data["bandwidth_bound_tokens_per_s"] > 5000
