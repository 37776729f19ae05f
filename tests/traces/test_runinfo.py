"""``run.json`` as ``RunInfo``: the JSON round trip, the layout on disk, and the version
rules (this version strict, older ones read where they can be, newer ones refused)."""

from __future__ import annotations

import copy
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from runbuilders import health, make_run, run_info

from traces import schema as s
from traces.errors import NewerRunInfoError, RunInfoError
from traces.io import read_run_info, write_run_info
from traces.prompts.maker import CalibrationSample, PromptStrategy
from traces.runinfo import (
    RUN_INFO_VERSION,
    LagSummary,
    PromptCalibration,
    PromptsInfo,
    RunInfo,
    ScrapeReport,
    WorkerHealth,
)

V1_RUN_JSON = Path(__file__).parent / "data" / "run_v1.json"
"""run.json as the build before the typed contract wrote it (schema_version 1), from a
two-second replay against the simulator; paths and platform shortened."""


def full_info() -> RunInfo:
    """A RunInfo with every optional part set: calibration, workers, scraping."""
    worker = WorkerHealth(
        shard=0,
        dispatched=10,
        rows=10,
        schedule_lag_ms=LagSummary(samples=10, p50_ms=0.1, p99_ms=0.9, max_ms=1.2),
        loop_lag_ms=LagSummary(samples=40, p50_ms=0.2, p99_ms=2.0, max_ms=3.5),
        cpu_utilisation=0.25,
        cpu_s=0.5,
    )
    # A Ray shard names its node (version 6); a local worker does not.
    on_node = replace(worker, shard=1, node="ab" * 28, host="10.0.0.2")
    base = run_info(generator_health=replace(health(), workers=(worker, on_node)))
    return replace(
        base,
        prompts=PromptsInfo(
            strategy=PromptStrategy(
                name="calibrated", block_size=16, seed=3, tokens_per_word=1.31, template_tokens=7
            ),
            calibration=PromptCalibration(
                samples=(
                    CalibrationSample(words=10, prompt_tokens=20),
                    CalibrationSample(words=100, prompt_tokens=138),
                ),
                tokens_per_word=1.31,
                overhead_tokens=7.0,
            ),
        ),
        server_metrics=ScrapeReport(
            url="http://127.0.0.1:1/metrics",
            interval_s=1.0,
            enabled=True,
            scrapes=3,
            samples=120,
            errors=1,
            last_error="timed out",
            file=s.SERVER_METRICS_FILE,
        ),
    )


def through_text(info: RunInfo) -> RunInfo:
    return RunInfo.from_json(json.loads(json.dumps(info.to_json())))


@pytest.mark.parametrize(
    "info",
    [full_info(), run_info(), run_info(duration_s=None, status="running")],
    ids=["full", "finished", "running"],
)
def test_round_trip_through_json_text(info: RunInfo) -> None:
    assert through_text(info) == info


def test_layout_on_disk(tmp_path: Path) -> None:
    write_run_info(tmp_path, full_info())
    doc = json.loads((tmp_path / s.RUN_JSON).read_text())
    assert doc["schema_version"] == RUN_INFO_VERSION
    assert set(doc) == {
        "schema_version", "run_id", "generator", "config", "endpoint", "load", "trace",
        "prompts", "clock", "versions", "status", "result", "health", "server_metrics",
    }  # fmt: skip
    # The strategy's fields and the calibration sit side by side, as before the contract.
    assert doc["prompts"]["name"] == "calibrated"
    assert doc["prompts"]["calibration"]["samples"][1] == {"words": 100, "prompt_tokens": 138}
    assert doc["health"]["workers"][0]["loop_lag_ms"]["p99_ms"] == 2.0
    assert "node" not in doc["health"]["workers"][0]  # None: left out
    assert doc["health"]["workers"][1]["host"] == "10.0.0.2"
    assert "reason" not in doc["server_metrics"]  # None: left out, as before
    assert doc["config"]["api_key_set"] is False
    running = run_info(duration_s=None, status="running").to_json()
    assert "result" not in running
    assert "health" not in running
    assert "server_metrics" not in running


def test_run_json_of_the_test_helpers_reads_back_as_written(tmp_path: Path) -> None:
    run = make_run(tmp_path / "run", n=20, schedule_lag_ms=3.0)
    raw = json.loads((run / s.RUN_JSON).read_text())
    info = read_run_info(run)
    assert info is not None
    assert info.to_json() == raw
    assert info.health is not None
    assert info.health.schedule_lag_ms.p99_ms == 3.0


def test_a_run_dir_without_run_json_has_none(tmp_path: Path) -> None:
    assert read_run_info(tmp_path) is None


def test_version_1_of_the_previous_build_is_read() -> None:
    raw = json.loads(V1_RUN_JSON.read_text())
    assert raw["schema_version"] == 1
    info = RunInfo.from_json(raw)
    assert info.status == "completed"
    assert info.config.headers == {"X-Api-Key": "<redacted>", "X-Other": "v"}
    assert info.endpoint.served_models == ("sim-model",)
    assert info.health is not None
    assert info.health.workers[0].rows == 6
    assert info.server_metrics is not None
    assert info.server_metrics.samples == 326
    # Same layout: written again, only the version changes, and the options added since
    # (``max_event_bytes``; ``extra_body``, ``stream``, ``http2``; ``api`` (None: each
    # row's own) and ``embed_batch``; the session options of version 5) are written as
    # unknown (None) or their defaults.
    config = {
        **raw["config"],
        "max_event_bytes": None,
        "extra_body": None,
        "stream": True,
        "http2": False,
        "sessions": "open",
        "max_sessions": None,
        "history": "trace",
        "start_offset_s": None,
        "warmup_s": None,
        "api": None,
        "embed_batch": 1,
        "prepare_ahead_mib": None,
    }
    assert info.to_json() == {**raw, "config": config, "schema_version": RUN_INFO_VERSION}


def _v2() -> dict[str, Any]:
    return full_info().to_json()


def test_unknown_keys_of_this_version_are_errors_by_name() -> None:
    doc = _v2()
    doc["health"]["workers"][0]["gpu_util"] = 0.5
    with pytest.raises(RunInfoError, match=r"unknown key\(s\) 'health\.workers\[0\]\.gpu_util'"):
        RunInfo.from_json(doc)
    doc = _v2()
    doc["gpu_topology"] = {}
    with pytest.raises(
        RunInfoError, match=r"unknown key\(s\) 'gpu_topology' \(known there: run_id"
    ):
        RunInfo.from_json(doc)


def test_unknown_keys_of_an_older_or_absent_version_are_ignored() -> None:
    for version in (1, None):
        doc = _v2()
        doc["schema_version"] = version
        doc["health"]["gpu_util"] = 0.5
        doc["legacy"] = True
        assert RunInfo.from_json(doc) == full_info()


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["endpoint"].pop("model"), r"missing key 'endpoint\.model'"),
        (lambda d: d.pop("prompts"), r"missing key 'prompts'"),
        (lambda d: d["prompts"].pop("name"), r"missing key 'prompts\.name'"),
        (
            lambda d: d["load"].update(requests="many"),
            r"'load\.requests' must be an integer, got a string \('many'\)",
        ),
        (
            lambda d: d["health"].update(client_bound=1),
            r"'health\.client_bound' must be true or false, got a number",
        ),
        (lambda d: d.update(versions=[]), r"'versions' must be an object, got an array"),
        (
            lambda d: d["result"]["by_outcome"].update(ok=1.5),
            r"'result\.by_outcome\.ok' must be an integer",
        ),
    ],
)
def test_a_bad_document_is_refused_naming_the_key(edit: Any, message: str) -> None:
    doc = _v2()
    edit(doc)
    with pytest.raises(RunInfoError, match=message) as info:
        RunInfo.from_json(doc, where="runs/a/run.json")
    assert str(info.value).startswith("runs/a/run.json: ")
    assert "\n" not in str(info.value)


def test_an_older_document_that_cannot_be_read_says_which_version_and_why() -> None:
    doc = copy.deepcopy(json.loads(V1_RUN_JSON.read_text()))
    # The first builds recorded the prompt strategy as "strategy", not "name".
    doc["prompts"] = {"strategy": "words", "block_size": 512, "seed": 0}
    with pytest.raises(RunInfoError, match=r"\(schema_version 1\) cannot be read: missing key"):
        RunInfo.from_json(doc)
    del doc["schema_version"]
    with pytest.raises(RunInfoError, match=r"\(no schema_version\) cannot be read"):
        RunInfo.from_json(doc)


def test_a_newer_version_is_refused_in_one_line() -> None:
    doc = _v2()
    doc["schema_version"] = RUN_INFO_VERSION + 1
    doc["something_new"] = {"x": 1}
    with pytest.raises(NewerRunInfoError) as info:
        RunInfo.from_json(doc, where="runs/a/run.json")
    text = str(info.value)
    assert "newer llm-loadgen" in text
    assert f"schema_version {RUN_INFO_VERSION + 1}" in text
    assert "\n" not in text
    assert info.value.exit_code == 2


@pytest.mark.parametrize("version", ["2", 2.0, True])
def test_a_version_that_is_not_an_integer_is_refused(version: object) -> None:
    doc = _v2()
    doc["schema_version"] = version
    with pytest.raises(RunInfoError, match="schema_version must be an integer"):
        RunInfo.from_json(doc)


def test_unreadable_run_json_is_a_run_info_error(tmp_path: Path) -> None:
    (tmp_path / s.RUN_JSON).write_text("{not json")
    with pytest.raises(RunInfoError, match=r"unreadable run\.json"):
        read_run_info(tmp_path)
    (tmp_path / s.RUN_JSON).write_text("[]")
    with pytest.raises(RunInfoError, match="expected a JSON object, got an array"):
        read_run_info(tmp_path)
