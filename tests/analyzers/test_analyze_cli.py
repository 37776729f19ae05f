"""``loadgen analyze`` and ``loadgen decompose``, invoked directly with CliRunner."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from runbuilders import run_info

from loadgen.cli.analyze import analyze
from loadgen.cli.decompose import decompose
from loadgen.cli.root import cli
from traces import schema as s
from traces.records import RequestRecord, records_to_batch
from traces.runinfo import RUN_INFO_VERSION

T0 = 1_700_000_000_000_000_000
MS = 1_000_000


def rec(i: int, **kw: Any) -> RequestRecord:
    due = T0 + i * 100 * MS
    prompt = 200 if i % 2 else 2000
    written = due + MS
    first = written + int((1 + 0.05 * prompt + 5) * MS)
    base: dict[str, Any] = {
        "run_id": "r",
        "trace_index": i,
        "request_id": f"q{i}",
        "x_request_id": f"r-q{i}",
        "workload": "short" if i % 2 else "long",
        "api": "chat",
        "input_tokens": prompt,
        "output_tokens": 3,
        "warmup": i == 0,
        "due_ns": due,
        "sent_ns": due,
        "request_written_ns": written,
        "first_byte_ns": written + MS // 2,
        "first_token_ns": first,
        "end_ns": first + 10 * MS,
        "chunk_offsets_us": [(first - due) // 1000 + k * 5000 for k in range(3)],
        "chunk_tokens": [1, 1, 1],
        "prompt_tokens": prompt,
        "completion_tokens": 3,
        "outcome": s.OUTCOME_OK,
        "server_queue_ms": 0.0,
        "server_prefill_ms": 0.05 * prompt,
        "server_transfer_ms": 0.0,
        "server_first_token_ms": 5.0,
        "server_ttft_ms": 0.05 * prompt + 5.0,
        "slo_ttft_ms": 50.0,
    }
    base.update(kw)
    return RequestRecord(**base)


@pytest.fixture
def run(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    path.mkdir()
    records = [rec(i) for i in range(21)]
    pq.write_table(pa.Table.from_batches([records_to_batch(records)]), path / s.REQUESTS_FILE)
    return path


def invoke(command: Any, args: list[Any]) -> tuple[int, str, str]:
    result = CliRunner().invoke(command, [str(a) for a in args], terminal_width=160)
    return result.exit_code, result.stdout, result.stderr


@pytest.mark.parametrize("command", [analyze, decompose])
def test_help(command: Any) -> None:
    code, out, _ = invoke(command, ["--help"])
    assert code == 0
    assert "--json" in out
    assert "--trim-start" in out
    assert "--percentiles" in out


def test_analyze_tables(run: Path) -> None:
    code, out, err = invoke(analyze, [run, "--percentiles", "50,99"])
    assert code == 0, err
    assert "TTFT (ms)" in out
    assert "Workload long" in out
    assert "Workload short" in out
    assert "requests 20" in out  # the warm-up row is left out
    assert "goodput 50.0%" in out  # long prompts miss their own 50 ms SLO
    assert "too small" in out


def test_analyze_json(run: Path) -> None:
    code, out, _ = invoke(
        analyze, [run, "--json", "--by", "none", "--percentiles", "50,99.9", "--trim-start", "0.5"]
    )
    assert code == 0
    doc = json.loads(out)
    assert doc["classes"] == []
    assert doc["percentiles"] == [50.0, 99.9]
    assert doc["overall"]["requests"] == 16  # due from 0.5 s on: q5..q20
    ttft = doc["overall"]["metrics"]["ttft_ms"]
    assert set(ttft) == {"count", "mean", "max", "p50", "p99.9"}
    assert doc["validity"]["too_small"] is True
    assert doc["overall"]["goodput"]["fraction"] == pytest.approx(0.5)


def test_analyze_global_slo(run: Path) -> None:
    code, out, _ = invoke(analyze, [run, "--json", "--slo-tpot-ms", "1"])
    assert code == 0
    assert json.loads(out)["overall"]["goodput"]["good"] == 0


@pytest.mark.parametrize("bad", ["50,abc", "0", "100", ""])
def test_bad_percentiles_exit_2(run: Path, bad: str) -> None:
    code, _, err = invoke(analyze, [run, "--percentiles", bad])
    assert code == 2
    assert "percentile" in err.lower() or "numbers" in err


def test_a_missing_run_exits_2(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["analyze", str(tmp_path / "missing")])
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith("error: ")
    assert result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_a_directory_without_rows_exits_3(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    code, out, err = invoke(analyze, [tmp_path / "empty"])
    assert code == 3
    assert err.startswith("error: ")
    assert err.count("\n") == 1
    assert out == ""


@pytest.mark.parametrize(
    "command", ["analyze", "decompose", "report", "export", "server-metrics", "gate"]
)
def test_run_of_a_newer_version_exits_2_in_one_line(
    run: Path, command: str, tmp_path: Path
) -> None:
    doc = run_info(requests=21).to_json()
    doc["schema_version"] = RUN_INFO_VERSION + 1
    (run / s.RUN_JSON).write_text(json.dumps(doc))
    extra = {
        "report": ["-o", str(tmp_path / "r.html")],
        "export": ["-o", str(tmp_path / "r.csv")],
        "gate": ["--slo", "ttft_ms.p99<=1000"],
    }.get(command, [])
    result = CliRunner().invoke(cli, [command, str(run), *extra])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ")
    assert "written by a newer llm-loadgen" in lines[0]
    assert "upgrade llm-loadgen" in lines[0]
    assert "Traceback" not in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_run_json_with_an_unknown_key_is_an_invalid_run(run: Path) -> None:
    doc = run_info(requests=21).to_json()
    doc["load"]["burstiness"] = 2.0
    (run / s.RUN_JSON).write_text(json.dumps(doc))
    result = CliRunner().invoke(cli, ["analyze", str(run)])
    assert result.exit_code == 3, result.output
    assert result.stderr.strip().splitlines() == [
        f"error: {run / s.RUN_JSON}: unknown key(s) 'load.burstiness' "
        "(known there: mode, time_factor, requests, workers)"
    ]


def test_decompose_tables_and_json(run: Path) -> None:
    args = [run, "--model", "llama-3.1-8b", "--gpu", "h200", "--slo-ttft-ms", "50"]
    code, out, err = invoke(decompose, args)
    assert code == 0, err
    assert "tail composition" in out
    assert "verdict:" in out
    assert "prefill" in out
    # Each request's network comes from the server's TTFT; the run's estimate stands in
    # only where a request has none, and the line says so.
    assert "network round trip: each request's own (server); the run's" in out
    code, out, _ = invoke(decompose, [*args, "--json", "--calibrate", "--hide-server-timings"])
    assert code == 0
    doc = json.loads(out)
    assert doc["server_timings_hidden"] is True
    # Two prompt lengths: no quadratic, but the efficiency fit (and FLOP/s) still holds.
    assert doc["calibration"]["b_us_per_token"] is None
    assert 0 < doc["calibration"]["fraction_of_peak"] <= 1
    assert doc["overall"]["slo_breaks"][0]["term"] == "prefill"


def test_decompose_load_replay_options(run: Path) -> None:
    base = [run, "--model", "llama-3.1-8b", "--gpu", "h200", "--hide-server-timings", "--json"]
    code, out, err = invoke(
        decompose, [*base, "--replicas", "2", "--chunk-tokens", "512", "--max-num-seqs", "8"]
    )
    assert code == 0, err
    doc = json.loads(out)
    assert doc["sources"]["prefill"] == "schedule"
    assert "2 replica(s), 512-token steps, up to 8 sequences" in doc["prediction"]
    code, out, err = invoke(decompose, [*base, "--batch-1"])
    assert code == 0, err
    doc = json.loads(out)
    assert doc["sources"]["prefill"] == "budget"
    assert doc["prediction"] == "batch-1 budget"
    code, out, err = invoke(decompose, [*base[:-1]])
    assert code == 0, err
    assert "server terms predicted by schedule replay of" in out


def test_decompose_without_budget_uses_server_timings(run: Path) -> None:
    code, out, _ = invoke(decompose, [run, "--json", "--by", "none"])
    assert code == 0
    assert json.loads(out)["sources"]["prefill"] == "server"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--hide-server-timings"], "needs a budget"),
        (["--model", "no-such-model", "--gpu", "h200"], "no-such-model"),
        (["--model", "llama-3.1-8b"], "--model and --gpu go together"),
        (["--budget", "nope.toml"], "nope.toml"),
    ],
)
def test_decompose_bad_input_exits_2(run: Path, args: list[str], message: str) -> None:
    code, _, err = invoke(decompose, [run, *args])
    assert code == 2
    assert message in err
