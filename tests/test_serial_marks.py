"""Every test that starts a server or a process is run alone, after the parallel part.

`make test` runs the suite in two passes: the tests without the ``serial`` mark on several
cores at once (pytest-xdist), then the ``serial`` ones one at a time, so a test that times
a real server never shares the cores with another test. A file outside the serial
directories (tests/support/suiteparts.py) that starts a server, a process or an event loop must
either carry ``pytestmark = pytest.mark.serial`` or be listed below as checked: it only
names a host in a URL string, or what it starts is checked for what it does, not for how
fast (a functional end-to-end test against the simulator, a benchmark's smoke mode).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from suiteparts import SERIAL_DIRS

TESTS = Path(__file__).parent

# What a file that times something real contains.
_STARTS_SOMETHING = re.compile(
    r"SimServer|sim_server|loadgen\.cli\.sim|hostile_server|h2server|subprocess|Popen"
    r"|127\.0\.0\.1|localhost|socket|asyncio\.run|serve\(|start_server|chromium|xllamacpp"
    r"|SimFactory|run_bench|importorskip\(\"ray\""
)
_MARKED = re.compile(r"^pytestmark = (?:.*\n){0,5}?.*pytest\.mark\.serial", re.M)

# Checked by hand: these match the pattern but time nothing, so they run in parallel.
NOT_TIMED = frozenset(
    {
        "test_cli_help.py",  # runs `--help` in a subprocess: output, not timing
        "test_layering.py",  # imports packages in a subprocess
        "test_wheel.py",  # builds and installs a wheel
        "test_serial_marks.py",  # this file: the pattern above
        "reports/test_report_html.py",  # a URL in a fixture's run.json
        "traces/test_runinfo.py",  # a URL in a RunInfo value
        "loadgen/test_redact.py",  # URLs with credentials to redact
        "loadgen/test_row_values.py",  # asyncio.run over an in-memory recorder
        "loadgen/test_runinfo.py",  # asyncio.run of the preflight's parsers
        "loadgen/test_recorder.py",  # a writer process killed to test recovery
        # End to end against the simulator, checking rows, columns and refusals, not times:
        "e2e/test_apis_e2e.py",  # Responses API and embeddings rows and token counts
        "e2e/test_context_limit_e2e.py",  # refusals of prompts beyond max_model_len
        "e2e/test_hostile_input.py",  # refused up front or replayed to the end
        "e2e/test_nostream_e2e.py",  # non-streamed rows; TTFT left null
        "e2e/test_prepare_ahead_e2e.py",  # the bodies built off the loop, byte for byte
        "e2e/test_prompt_fidelity.py",  # token counts of the prompts sent
        "e2e/test_ray_shards.py",  # shards as Ray tasks give every row once
        "e2e/test_run_limits_e2e.py",  # refusals under RLIMIT_NOFILE and RLIMIT_FSIZE
        "e2e/test_sessions_e2e.py",  # turn order (a lower bound: load only delays)
        "e2e/test_sweep_e2e.py",  # a sweep's directory and demo-compare's withheld verdicts
        "e2e/test_tool_calls_e2e.py",  # tool-call replies recorded as such
        "e2e/test_trace_fuzz.py",  # fuzzed traces refused up front or sent whole
        "sim/test_sim_config.py",  # the sim command line's validation in process
        # Benchmarks' smoke modes: every figure printed, none compared with a target:
        "bench/test_analysis_scale_smoke.py",
        "bench/test_client_hostile_smoke.py",
        "bench/test_client_ingest_smoke.py",
        "bench/test_closed_loop_ttft_smoke.py",
        "bench/test_max_rate_smoke.py",
        "bench/test_prepare_ahead_smoke.py",
        "bench/test_record_cost_smoke.py",
        "bench/test_replay_schedule_smoke.py",
        "bench/test_simulate_smoke.py",
        "bench/test_wakeup_smoke.py",
    }
)


def _parallel_files() -> list[Path]:
    return sorted(
        path
        for path in TESTS.rglob("test_*.py")
        if path.relative_to(TESTS).parts[0] not in SERIAL_DIRS
    )


@pytest.mark.parametrize("path", _parallel_files(), ids=lambda p: str(p.relative_to(TESTS)))
def test_a_file_that_starts_something_is_serial_or_checked(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    name = path.relative_to(TESTS).as_posix()
    if _STARTS_SOMETHING.search(text) and name not in NOT_TIMED:
        assert _MARKED.search(text), (
            f"{name} starts a server or process: add `pytestmark = pytest.mark.serial`, "
            "or list it in NOT_TIMED with the reason it times nothing"
        )


def test_every_checked_file_exists() -> None:
    missing = sorted(name for name in NOT_TIMED if not (TESTS / name).is_file())
    assert missing == []
