"""The dispatch record and the run lock, on their own: what a killed run leaves and what
tells a live run from a dead one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from loadgen.dispatched import CHUNK_RECORDS, RECORD_BYTES, DispatchLog, read_dispatched
from loadgen.errors import RunLiveError
from loadgen.run.runlock import RunLock
from traces import schema as s

pytestmark = pytest.mark.serial


def test_each_marker_appends_one_record_and_a_torn_tail_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / s.DISPATCH_FILE
    log = DispatchLog(path)
    marks = [log.marker(i) for i in (7, 0, 2**40, 7)]
    for mark in marks:
        mark()
    assert read_dispatched(path) == [7, 0, 2**40, 7]  # readable while the log is open
    log.close()
    assert path.stat().st_size == 4 * RECORD_BYTES  # cut to the records at close
    log.marker(9)()  # closed: writes nothing
    marks[0]()  # nor does a marker made before the close
    with path.open("ab") as f:
        f.write(b"\x01\x02\x03")  # a write cut short
    assert read_dispatched(path) == [7, 0, 2**40, 7]


def test_records_run_on_across_chunks_and_a_log_opened_again_keeps_them(tmp_path: Path) -> None:
    path = tmp_path / s.DISPATCH_FILE
    log = DispatchLog(path)
    first = 2 * CHUNK_RECORDS + 3  # past two chunk ends
    for i in range(first):
        log.marker(i)()
    assert read_dispatched(path) == list(range(first))
    log.close()
    again = DispatchLog(path)  # appends after what is there
    for i in range(CHUNK_RECORDS):
        again.marker(first + i)()
    assert read_dispatched(path) == list(range(first + CHUNK_RECORDS))
    again.close()
    assert path.stat().st_size == (first + CHUNK_RECORDS) * RECORD_BYTES


def test_a_chunk_that_cannot_be_laid_out_fails_once_then_stores_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / s.DISPATCH_FILE
    log = DispatchLog(path)
    for i in range(CHUNK_RECORDS - 1):
        log.marker(i)()

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    with pytest.raises(OSError, match="No space"):
        log.marker(CHUNK_RECORDS - 1)()  # the chunk's last record: the next one fails
    log.marker(CHUNK_RECORDS)()  # nothing stored, nothing raised
    log.close()
    assert read_dispatched(path) == list(range(CHUNK_RECORDS))
    assert path.stat().st_size == CHUNK_RECORDS * RECORD_BYTES


def test_records_survive_a_process_killed_with_sigkill(tmp_path: Path) -> None:
    path = tmp_path / s.DISPATCH_FILE
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from loadgen.dispatched import DispatchLog\n"
        "log = DispatchLog(Path(sys.argv[1]))\n"
        "for i in range(1000):\n"
        "    log.marker(i)()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(path)], timeout=60, check=False)
    assert proc.returncode == -9
    assert path.stat().st_size > 1000 * RECORD_BYTES  # the chunk's unused rest, never cut
    assert read_dispatched(path) == list(range(1000))


def test_a_held_run_cannot_be_claimed_and_a_released_one_can(tmp_path: Path) -> None:
    session = RunLock.claim(tmp_path, doing="x")
    session.hold_for_run()
    worker = RunLock.share(tmp_path)  # a shard shares it
    with pytest.raises(RunLiveError, match=f"pid {os.getpid()}") as refused:
        RunLock.claim(tmp_path, doing="wait for it")
    assert refused.value.holder.startswith(f"pid {os.getpid()} on ")
    session.release(unlink=False)
    with pytest.raises(RunLiveError):  # the worker still lives
        RunLock.claim(tmp_path, doing="x")
    worker.release(unlink=False)
    recovery = RunLock.claim(tmp_path, doing="x")
    recovery.release(unlink=True)
    assert not (tmp_path / s.RUN_LOCK).exists()


def test_a_killed_holder_frees_the_run(tmp_path: Path) -> None:
    code = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "from loadgen.run.runlock import RunLock\n"
        "RunLock.claim(Path(sys.argv[1]), doing='x').hold_for_run()\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path)], timeout=60, check=False)
    assert proc.returncode == -9
    assert (tmp_path / s.RUN_LOCK).exists()
    RunLock.claim(tmp_path, doing="x").release(unlink=True)
