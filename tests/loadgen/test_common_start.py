"""The common start of ``--workers``: what a worker does with its start pipe (the whole
protocol runs in ``tests/e2e``: every ``--workers 2`` replay goes through it)."""

from __future__ import annotations

import multiprocessing

import pytest

from loadgen.run.workers import _await_start, _NotStarted


def test_a_worker_gets_the_start_its_parent_sends() -> None:
    receive, send = multiprocessing.Pipe(duplex=False)
    send.send(1_234_567_890)
    assert _await_start(receive, 1.0) == 1_234_567_890


def test_a_called_off_run_fails_the_waiting_worker_at_once() -> None:
    receive, send = multiprocessing.Pipe(duplex=False)
    send.close()  # the parent called the run off, or died
    with pytest.raises(_NotStarted, match="called off"):
        _await_start(receive, 30.0)


def test_a_start_that_never_comes_is_a_bounded_wait() -> None:
    receive, _send = multiprocessing.Pipe(duplex=False)
    with pytest.raises(_NotStarted, match="no common start within"):
        _await_start(receive, 0.05)
