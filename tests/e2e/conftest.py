"""Fixtures for end-to-end tests against real servers on port 0.

``sim`` starts simulator processes on demand and stops them all after the test::

    def test_something(sim: SimFactory) -> None:
        server = sim("--itl-ms", "5", "--tokens-per-chunk", "2")
        httpx.get(f"{server.root_url}/health")
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import ExitStack

import pytest

from loadgen.sim.launch import SimProcess, start_sim

SimFactory = Callable[..., SimProcess]


@pytest.fixture
def sim() -> Iterator[SimFactory]:
    """A factory ``sim(*args) -> SimProcess``; every process it started is stopped after."""
    with ExitStack() as stack:

        def start(*args: str) -> SimProcess:
            return stack.enter_context(start_sim(args))

        yield start
