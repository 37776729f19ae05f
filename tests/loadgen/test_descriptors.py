"""The open-file limit against a run's connections (``loadgen.run.descriptors``), in
subprocesses whose ``RLIMIT_NOFILE`` is set before they start: raised when the hard limit
allows, refused with the number and ``ulimit -n`` when a planned number does not fit."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from collections.abc import Callable

import pytest

pytestmark = [
    pytest.mark.skipif(sys.platform == "win32", reason="no RLIMIT_NOFILE"),
    pytest.mark.serial,
]

_PROBE = """
import json, resource, sys
from loadgen.errors import ConfigError
from loadgen.run.descriptors import ensure_descriptors

connections, planned_by = int(sys.argv[1]), sys.argv[2] or None
try:
    found = ensure_descriptors(connections, planned_by=planned_by)
    out = {"needed": found.needed, "raised": found.raised}
except ConfigError as exc:
    out = {"refused": str(exc)}
out["soft"] = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
print(json.dumps(out))
"""


def limited(soft: int, hard: int) -> Callable[[], None]:
    def set_limit() -> None:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

    return set_limit


def probe(connections: int, planned_by: str | None, soft: int, hard: int) -> dict[str, object]:
    _, current_hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if current_hard != resource.RLIM_INFINITY and current_hard < hard:
        pytest.skip(f"this process's hard limit ({current_hard}) is below {hard}")
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(connections), planned_by or ""],
        preexec_fn=limited(soft, hard),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    result: dict[str, object] = json.loads(done.stdout)
    return result


def test_the_soft_limit_is_raised_to_what_the_connections_need() -> None:
    got = probe(1000, "--concurrency 1000", soft=128, hard=4096)
    assert got["raised"] is True
    assert isinstance(got["needed"], int)
    assert 1000 < got["needed"] < 1100
    assert got["soft"] == got["needed"]


def test_a_planned_number_beyond_the_hard_limit_is_refused_in_one_line() -> None:
    got = probe(1000, "--concurrency 1000", soft=256, hard=256)
    refused = got["refused"]
    assert isinstance(refused, str)
    assert "\n" not in refused
    assert refused.startswith("--concurrency 1000 needs about 10")
    assert "may open 256 (hard limit 256)" in refused
    assert "`ulimit -n 10" in refused
    assert got["soft"] == 256


def test_an_open_loop_without_a_cap_gets_what_the_hard_limit_allows() -> None:
    """Only the most it could open, not a plan: never refused; connects beyond the limit
    are connect_error rows."""
    got = probe(5000, None, soft=128, hard=1024)
    assert "refused" not in got
    assert got["soft"] == 1024


def test_enough_is_left_alone() -> None:
    got = probe(10, "--concurrency 10", soft=1024, hard=4096)
    assert got["raised"] is False
    assert got["soft"] == 1024
