"""``recover_run`` and the analysers' automatic recovery on hand-built killed runs: the
lost count from the dispatch record (exact), the schedule inference for a run without one
(a lower bound), and a live run left alone."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from runbuilders import make_run, run_info

from loadgen.cli.runstatus import warn_if_incomplete
from loadgen.dispatched import DispatchLog
from loadgen.errors import RunLiveError
from loadgen.run.recover import recover_run
from loadgen.run.runlock import RunLock
from traces import schema as s
from traces.io import read_run_info, write_run_info


def _killed_run(path: Path, *, rows: list[int], sent: list[int] | None) -> Path:
    """A run of 10 requests killed with ``rows`` journaled and ``sent`` in its dispatch
    record (None: a run of an earlier build, without one)."""
    make_run(path, n=10)
    table = pq.read_table(path / s.REQUESTS_FILE)
    (path / s.REQUESTS_FILE).unlink()
    parts = path / s.PARTS_DIR
    parts.mkdir()
    kept = table.take(rows)
    with (
        pa.OSFile(str(parts / s.JOURNAL_FILE), "wb") as sink,
        pa.ipc.new_stream(sink, kept.schema) as journal,
    ):
        journal.write_table(kept)
    if sent is not None:
        log = DispatchLog(parts / s.DISPATCH_FILE)
        for index in sent:
            log.marker(index)()
        log.close()
    # No readable trace: the schedule inference falls back on the rows' indices.
    write_run_info(path, run_info(requests=10, status="running", duration_s=None))
    return path


def test_the_dispatch_record_counts_the_lost_exactly(tmp_path: Path) -> None:
    # Sent 0-8 (3 retried on a fresh connection: twice), rows for 0-2 and 4-5: 3, 6, 7, 8
    # were sent and never recorded.
    run = _killed_run(tmp_path / "run", rows=[0, 1, 2, 4, 5], sent=[0, 1, 2, 3, 3, *range(4, 9)])
    result = recover_run(run)
    assert result.changed
    info = result.info.incomplete
    assert info is not None
    assert (info.rows, info.dispatched, info.lost, info.exact) == (5, 9, 4, True)
    assert result.note is None  # the schedule was not needed
    assert not (run / s.PARTS_DIR).exists()
    assert not (run / s.RUN_LOCK).exists()
    assert pq.read_metadata(run / s.REQUESTS_FILE).num_rows == 5
    read = read_run_info(run)
    assert read is not None
    assert read.incomplete == info
    assert "4 requests sent and not recorded" in (read.status_problem() or "")


def test_without_a_dispatch_record_the_count_is_a_lower_bound(tmp_path: Path) -> None:
    run = _killed_run(tmp_path / "run", rows=[0, 1, 2, 4, 5], sent=None)
    result = recover_run(run)
    info = result.info.incomplete
    assert info is not None
    # Up to the last row recorded (5): 6 certainly sent, 1 of them (3) lost.
    assert (info.rows, info.dispatched, info.lost, info.exact) == (5, 6, 1, False)
    assert result.note is not None
    assert "trace could not be read" in result.note
    assert "at least 1 requests" in (result.info.status_problem() or "")


def test_the_analysers_recover_a_dead_run_and_leave_a_live_one_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run = _killed_run(tmp_path / "run", rows=[0, 1], sent=[0, 1, 2])
    live = RunLock.claim(run, doing="x")
    live.hold_for_run()
    with pytest.raises(RunLiveError, match="a replay is still writing this run"):
        recover_run(run)
    problems = warn_if_incomplete(run)
    assert len(problems) == 1
    assert "is still running (pid" in problems[0]
    assert (run / s.PARTS_DIR / s.JOURNAL_FILE).exists()  # untouched
    live.release(unlink=False)  # the replay is gone

    capsys.readouterr()
    problems = warn_if_incomplete(run)
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"recovered {run}: incomplete (the replay process died (killed?) before it "
        "finished): 2 rows recovered of 10 scheduled; 3 requests sent, 1 of them lost "
        "(sent, never recorded)"
    )
    assert err[1].startswith(f"warning: {run}: run r is incomplete")
    assert len(problems) == 1
    assert warn_if_incomplete(run) == problems  # recovered once; the warning stays
    assert "recovered" not in capsys.readouterr().err


def test_a_dead_run_that_cannot_be_recovered_here_is_still_analysed(tmp_path: Path) -> None:
    run = _killed_run(tmp_path / "run", rows=[0, 1], sent=[0, 1, 2])
    (run / s.RUN_LOCK).mkdir()  # its lock cannot be opened (as on a read-only copy)
    problems = warn_if_incomplete(run)
    assert len(problems) == 1
    assert "could not be recovered here" in problems[0]
    assert (run / s.PARTS_DIR / s.JOURNAL_FILE).exists()
