"""``--extra-body`` and a trace's sampling columns: what reaches the request body, what is
refused (one line), and the trace rules for the columns."""

from __future__ import annotations

from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from loadgen.cli.root import cli
from loadgen.openai.bodies import OWNED_FIELDS, build_body, extra_body_problem, row_fields
from loadgen.prepare.preparer import Preparer
from traces.errors import ValidationError
from traces.io import read_trace, write_trace
from traces.prompts.maker import Prompt, PromptMaker
from traces.runinfo import Capabilities

pytestmark = pytest.mark.serial


def _trace(path: Path, *, check: bool = True, **columns: list[object]) -> Path:
    n = len(next(iter(columns.values()))) if columns else 2
    table = pa.table(
        {
            "request_id": [f"r{i}" for i in range(n)],
            "arrival_s": [float(i) for i in range(n)],
            "input_tokens": [8] * n,
            "output_tokens": [4] * n,
            **columns,
        }
    )
    if check:
        write_trace(table, path)
    else:  # as another tool would write it: the reader's rules are under test
        pq.write_table(table, path)
    return path


def test_fields_merge_ours_then_probed_extras_then_extra_body_then_the_row(tmp_path: Path) -> None:
    path = _trace(
        tmp_path / "t.parquet",
        temperature=[0.5, None],
        top_p=[0.9, None],
        seed=[7, None],
        min_tokens=[2, None],
        ignore_eos=[False, None],
    )
    first, second = read_trace(path)
    preparer = Preparer(
        prompts=PromptMaker(block_size=16, seed=0),
        model="m",
        run_id="run",
        capabilities=Capabilities(),
        extra_body={"temperature": 1.0, "top_k": 5, "min_tokens": 1},
    )
    body = orjson.loads(preparer.prepare(first, 0).body)
    # The row wins over --extra-body, which wins over the probed extras.
    assert (body["temperature"], body["top_p"], body["seed"]) == (0.5, 0.9, 7)
    assert (body["min_tokens"], body["ignore_eos"], body["top_k"]) == (2, False, 5)
    assert body["stream"] is True
    assert body["max_tokens"] == 4
    body = orjson.loads(preparer.prepare(second, 1).body)
    assert (body["temperature"], body["min_tokens"], body["ignore_eos"]) == (1.0, 1, True)
    assert "top_p" not in body
    assert "seed" not in body
    assert row_fields(second) is None


def test_a_non_streamed_body_asks_for_no_stream_and_no_stream_options() -> None:
    body = orjson.loads(
        build_body(
            api="chat",
            model="m",
            prompt=Prompt(text="hi"),
            max_tokens=3,
            caps=Capabilities(),
            stream=False,
        )
    )
    assert body["stream"] is False
    assert "stream_options" not in body


@pytest.mark.parametrize("key", sorted(OWNED_FIELDS))
def test_extra_body_may_not_set_what_the_client_owns(key: str) -> None:
    problem = extra_body_problem({key: 1, "temperature": 0})
    assert problem is not None
    assert key in problem
    assert extra_body_problem({"temperature": 0, "chat_template_kwargs": {}}) is None
    assert extra_body_problem([1]) == "must be a JSON object, got list"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('{"model": "x"}', "sets model, which the client owns"),
        ('{"stream": false}', "sets stream, which the client owns"),
        ("{not json", "is not valid JSON"),
        ("[1, 2]", "must be a JSON object"),
    ],
)
def test_replay_refuses_a_bad_extra_body_in_one_line(tmp_path: Path, value: str, says: str) -> None:
    trace = _trace(tmp_path / "t.parquet")
    result = CliRunner().invoke(
        cli,
        ["replay", str(trace), "--no-preflight", "--model", "m", "--extra-body", value],
    )
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: --extra-body")
    assert says in lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(
    ("column", "values", "bad", "says"),
    [
        ("temperature", [0.0, -0.5], 1, "temperature must be a finite number >= 0"),
        ("temperature", [float("nan"), 1.0], 0, "temperature must be a finite number >= 0"),
        ("top_p", [1.0, 1.5], 1, "top_p must be in (0, 1]"),
        ("top_p", [0.0, 1.0], 0, "top_p must be in (0, 1]"),
        ("min_tokens", [4, 5], 1, "min_tokens must be 0..output_tokens"),
        ("min_tokens", [-1, 0], 0, "min_tokens must be 0..output_tokens"),
    ],
)
def test_sampling_columns_outside_what_engines_take_are_refused_by_row(
    tmp_path: Path, column: str, values: list[object], bad: int, says: str
) -> None:
    path = _trace(tmp_path / "t.parquet", check=False, **{column: values})
    with pytest.raises(ValidationError) as info:
        read_trace(path)
    assert info.value.row == bad
    assert info.value.column == column
    assert says in str(info.value)


def test_a_sweep_sends_the_extra_body_and_no_stream_as_replay_does(tmp_path: Path) -> None:
    """``--extra-body`` and ``--no-stream`` are the replay's and the sweep's alike: the dry
    run's first body carries both (no connection is made: port 9 is closed)."""
    trace = _trace(tmp_path / "t.parquet")
    args = ["--base-url", "http://127.0.0.1:9/v1", "--extra-body", '{"top_k": 20}']
    result = CliRunner().invoke(
        cli,
        ["sweep", str(trace), *args, "-o", str(tmp_path / "sw"), "--rates", "1x", "--dry-run",
         "--no-stream"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    body = next(line for line in result.output.splitlines() if line.startswith("{"))
    assert '"top_k":20' in body
    assert '"stream":false' in body
    assert not (tmp_path / "sw").exists()
