"""What the replay records in run.json: every option, no secret, and a real session's
run.json read back as the RunInfo it was written from."""

from __future__ import annotations

import asyncio
import json
import os
import platform
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pyarrow as pa

from loadgen.run.options import SessionOptions
from loadgen.run.session import run_session
from loadgen.sim.launch import start_sim
from traces import schema as s
from traces.io import read_run_info, write_trace
from traces.runinfo import RUN_INFO_VERSION, RunConfig, RunInfo

SECRET = "sk-do-not-record-0123456789"


def test_run_config_records_every_option_but_the_key() -> None:
    # A new SessionOptions field must be added to RunConfig (and docs/formats.md): run.json
    # is a contract, and an unrecorded option makes two runs look alike when they are not.
    options = {f.name for f in fields(SessionOptions)}
    recorded = {f.name for f in fields(RunConfig)}
    assert options - {"api_key"} == recorded - {"api_key_set"}


def test_public_config_holds_no_secret() -> None:
    opts = SessionOptions(
        trace_path=Path("t.parquet"),
        run_dir=Path("run"),
        base_url="http://h/v1",
        api_key=SECRET,
        headers={"Authorization": f"Bearer {SECRET}", "X-Session-Token": SECRET, "X-Team": "a"},
    )
    config = opts.public_config()
    assert config.api_key_set
    assert config.trace_path == "t.parquet"
    assert config.headers == {
        "Authorization": "<redacted>",
        "X-Session-Token": "<redacted>",
        "X-Team": "a",
    }
    assert SECRET not in repr(config)


def test_a_real_run_json_reads_back_as_written(tmp_path: Path) -> None:
    n = 4
    trace = tmp_path / "t.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i * 0.02 for i in range(n)],
                "input_tokens": [16] * n,
                "output_tokens": [3] * n,
            }
        ),
        trace,
    )
    with start_sim(["--ttft-ms", "1", "--itl-ms", "1"]) as sim:
        opts = SessionOptions(
            trace_path=trace,
            run_dir=tmp_path / "run",
            base_url=sim.base_url,
            api_key=SECRET,
            headers={"X-Api-Key": SECRET},
            scrape_interval_s=0.2,
        )
        asyncio.run(run_session(opts, install_signal_handlers=False))
    text = (tmp_path / "run" / s.RUN_JSON).read_text()
    assert SECRET not in text
    raw = json.loads(text)
    assert raw["schema_version"] == RUN_INFO_VERSION
    info = read_run_info(tmp_path / "run")
    assert info is not None
    assert info.to_json() == raw
    assert RunInfo.from_json(info.to_json()) == info
    assert info.status == "completed"
    assert info.result is not None
    assert info.result.by_outcome == {"ok": n}
    assert info.health is not None
    assert [w.rows for w in info.health.workers] == [n]
    assert info.server_metrics is not None
    assert info.server_metrics.enabled
    assert info.config.headers == {"X-Api-Key": "<redacted>"}


def test_the_platform_is_read_without_a_subprocess() -> None:
    # platform.platform() runs `uname -p` in a subprocess (and scans the Python binary for
    # its libc) just before a run starts; run.json gets the same string without either. A
    # fresh interpreter: platform caches what it found, so this one may already have it.
    script = (
        "import sys\n"
        "spawned = []\n"
        "sys.addaudithook(lambda e, a: spawned.append(a) if e == 'subprocess.Popen' else None)\n"
        "from loadgen.run.runinfo import versions\n"
        "print(versions()['platform'])\n"
        "print(spawned)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=True
    )
    name, spawned = done.stdout.splitlines()
    assert spawned == "[]"
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert name == platform.platform()
    else:
        assert name.startswith(os.uname().sysname)
