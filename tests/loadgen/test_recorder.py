"""The run writer: a journal appended as the run goes, readable after a crash, merged on close."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from loadgen.errors import RecorderError
from loadgen.run.recorder import RunRecorder, merge_parts
from traces import schema as s
from traces.io import read_journal, read_run_table
from traces.records import RequestRecord


def record(i: int) -> RequestRecord:
    return RequestRecord(
        run_id="r",
        trace_index=i,
        request_id=str(i),
        x_request_id=f"r-{i}",
        workload="text",
        api="chat",
        input_tokens=10,
        output_tokens=2,
        due_ns=i,
        sent_ns=i + 1,
        chunk_offsets_us=[10, 20],
        outcome=s.OUTCOME_OK,
    )


def wait_for(rec: RunRecorder, rows: int) -> None:
    deadline = time.monotonic() + 10
    while rec.rows_written < rows and time.monotonic() < deadline:
        time.sleep(0.01)
    assert rec.rows_written == rows


def test_rows_are_flushed_by_count_and_merged_on_close(tmp_path: Path) -> None:
    rec = RunRecorder(tmp_path, flush_rows=10, flush_interval_s=60)
    for i in range(25):
        rec.add(record(i))
    wait_for(rec, 20)
    journal = tmp_path / s.PARTS_DIR / s.JOURNAL_FILE
    # A run killed now would still be readable from its journal.
    assert read_journal(journal).num_rows == 20
    assert read_run_table(tmp_path).num_rows == 20
    out = rec.close()
    assert out == tmp_path / s.REQUESTS_FILE
    assert not (tmp_path / s.PARTS_DIR).exists()
    table = pq.read_table(out)
    assert table.num_rows == 25
    assert sorted(table.column(s.TRACE_INDEX).to_pylist()) == list(range(25))


def test_rows_are_flushed_by_time(tmp_path: Path) -> None:
    rec = RunRecorder(tmp_path, flush_rows=1000, flush_interval_s=0.05)
    rec.add(record(0))
    wait_for(rec, 1)
    rec.close()


def test_a_torn_journal_keeps_its_complete_batches_and_merges(tmp_path: Path) -> None:
    rec = RunRecorder(tmp_path, flush_rows=2, flush_interval_s=60)
    for i in range(6):
        rec.add(record(i))
    wait_for(rec, 6)
    journal = tmp_path / s.PARTS_DIR / s.JOURNAL_FILE
    # Simulate a crash in the middle of a write: cut the file inside its last batch.
    data = journal.read_bytes()
    torn = tmp_path / "torn"
    (torn / s.PARTS_DIR).mkdir(parents=True)
    (torn / s.PARTS_DIR / s.JOURNAL_FILE).write_bytes(data[:-50])
    assert read_journal(torn / s.PARTS_DIR / s.JOURNAL_FILE).num_rows == 4
    merge_parts(torn)
    assert pq.read_table(torn / s.REQUESTS_FILE).num_rows == 4
    rec.close()


def test_a_row_no_column_holds_stops_the_recorder_loudly_and_keeps_the_rest(
    tmp_path: Path,
) -> None:
    """The second line behind the record builder: the batch's other rows are written, the
    failure is reported at once and names the row, later rows are dropped and counted, and
    ``close`` raises; what was written is merged."""
    told: list[str] = []
    rec = RunRecorder(tmp_path, flush_rows=5, flush_interval_s=60, on_failure=told.append)
    for i in range(5):
        rec.add(replace(record(i), completion_tokens=2**40) if i == 3 else record(i))
    deadline = time.monotonic() + 10
    while not told and time.monotonic() < deadline:
        time.sleep(0.01)
    assert told == [
        "the row of request '3' cannot be stored: "
        "completion_tokens: 1099511627776 does not fit int32"
    ]
    assert rec.failure == told[0]
    assert rec.rows_written == 4
    rec.add(record(5))
    with pytest.raises(RecorderError, match=r"with 4 rows written and 2 not$"):
        rec.close()
    table = pq.read_table(tmp_path / s.REQUESTS_FILE)
    assert table.column(s.TRACE_INDEX).to_pylist() == [0, 1, 2, 4]


_FULL_DISK = """
import resource, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from test_recorder import record
from loadgen.errors import RecorderError
from loadgen.run.recorder import RunRecorder
from traces.io import read_run_table

run_dir = Path(sys.argv[1])
told = []
rec = RunRecorder(run_dir, flush_rows=50, flush_interval_s=60, on_failure=told.append)
for i in range(50):
    rec.add(record(i))
while rec.rows_written < 50:
    time.sleep(0.01)
# From here on, no file may grow past its size now (RLIMIT_FSIZE): as good as a full disk.
size = (run_dir / "requests.parts" / "journal.arrows").stat().st_size
resource.setrlimit(resource.RLIMIT_FSIZE, (size + 100, resource.RLIM_INFINITY))
for i in range(50, 100):
    rec.add(record(i))
try:
    rec.close()
except RecorderError as exc:
    print("raised:", exc)
print("told:", told)
print("rows:", read_run_table(run_dir).num_rows)
"""


def test_a_write_that_fails_stops_the_recorder_and_keeps_what_was_written(
    tmp_path: Path,
) -> None:
    script = _FULL_DISK.format(tests=str(Path(__file__).parent))
    done = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    raised, told, rows = done.stdout.splitlines()
    assert raised.startswith("raised: run recorder: cannot write to ")
    assert "File too large" in raised
    assert raised.endswith("the run stopped with 50 rows written and 50 not")
    assert "File too large" in told
    assert rows == "rows: 50"


def test_a_journal_that_cannot_be_opened_is_no_empty_journal(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        read_journal(tmp_path / s.JOURNAL_FILE)


def _journal_of(run_dir: Path, rows: int) -> Path:
    rec = RunRecorder(run_dir, flush_rows=rows, flush_interval_s=60)
    for i in range(rows):
        rec.add(record(i))
    wait_for(rec, rows)
    # Leave the journal as a killed run leaves it: no close, no merge.
    journal = run_dir / s.PARTS_DIR / s.JOURNAL_FILE
    return journal


def test_a_merge_never_writes_fewer_rows_than_were_written(tmp_path: Path) -> None:
    journal = _journal_of(tmp_path, 6)
    before = journal.read_bytes()
    with pytest.raises(RecorderError, match="6 rows read back where 7 were written"):
        merge_parts(tmp_path, expected_rows=7)
    assert journal.read_bytes() == before
    assert not (tmp_path / s.REQUESTS_FILE).exists()
    assert merge_parts(tmp_path, expected_rows=6) == tmp_path / s.REQUESTS_FILE
    assert pq.read_table(tmp_path / s.REQUESTS_FILE).num_rows == 6


_NO_DESCRIPTORS = """
import os, resource, sys
from pathlib import Path
from loadgen.errors import RecorderError
from loadgen.run.recorder import merge_parts

run_dir = Path(sys.argv[1])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (64, hard))
held = []
try:
    while True:  # every descriptor taken, as by a run's thousand open connections
        held.append(os.open(os.devnull, os.O_RDONLY))
except OSError:
    pass
try:
    merge_parts(run_dir, expected_rows=None)
    print("merged")
except RecorderError as exc:
    print("raised:", exc)
"""


def test_a_merge_without_descriptors_leaves_the_journal(tmp_path: Path) -> None:
    """Was: the journal reader took "cannot open" for "ended early", the merge wrote an
    empty requests.parquet over the rows and deleted the journal."""
    journal = _journal_of(tmp_path, 5)
    before = journal.read_bytes()
    done = subprocess.run(
        [sys.executable, "-c", _NO_DESCRIPTORS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert done.stdout.startswith("raised: cannot merge the rows of ")
    assert "Too many open files" in done.stdout
    assert journal.read_bytes() == before
    assert not (tmp_path / s.REQUESTS_FILE).exists()
    assert read_run_table(tmp_path).num_rows == 5


def _recorder_pauses(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The sleeps the recorder's thread takes from now on (``time.sleep`` still sleeps)."""
    real_sleep = time.sleep
    pauses: list[float] = []

    def sleep(seconds: float) -> None:
        if threading.current_thread().name == "run-recorder":
            pauses.append(seconds)
        real_sleep(seconds)

    monkeypatch.setattr(time, "sleep", sleep)
    return pauses


def test_a_batch_converts_with_pauses_while_the_run_goes_on_and_none_at_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The recorder's thread lets the GIL go after every column while the event loop may
    # have requests due; at close nothing is due and a pause would only slow the merge.
    pauses = _recorder_pauses(monkeypatch)
    rec = RunRecorder(
        tmp_path, flush_rows=10, flush_interval_s=60, column_pause_s=0.0002, paced_rows=10
    )
    for i in range(15):
        rec.add(record(i))
    wait_for(rec, 10)
    assert pauses == [0.0002] * len(s.RUN_SCHEMA)
    rec.close()
    assert len(pauses) == len(s.RUN_SCHEMA)
    assert read_run_table(tmp_path).num_rows == 15


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_the_recorder_thread_runs_at_a_lower_priority_than_the_loop(tmp_path: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    rec = RunRecorder(tmp_path, flush_rows=10, flush_interval_s=0.05)
    try:
        rec.add(record(0))
        wait_for(rec, 1)  # the thread has set its priority before its first flush
        native_id = rec._thread.native_id
        assert native_id is not None
        # ten above ours, at most 19
        assert os.getpriority(os.PRIO_PROCESS, native_id) == min(19, ours + 10)
        assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == ours
    finally:
        rec.close()


def test_a_small_batch_converts_without_pauses(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A timed flush at a low rate holds a few rows: converting them at once costs the loop
    # less than the thread waking after every column.
    pauses = _recorder_pauses(monkeypatch)
    rec = RunRecorder(tmp_path, flush_rows=10, flush_interval_s=60, paced_rows=11)
    for i in range(10):
        rec.add(record(i))
    wait_for(rec, 10)
    assert pauses == []
    rec.close()
