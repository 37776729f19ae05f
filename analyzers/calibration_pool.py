"""Calibration points of several runs of one server as one set (``plan calibrate RUN RUN``).

Imports what :mod:`analyzers.calibration_points` imports (polars through it); never
``loadgen``.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

from analyzers.budget.measurements import Observation, median_observations
from analyzers.calibration_points import RunPoints
from analyzers.frontend_share import FrontEndShare, front_end_share, ms_text


@dataclass(frozen=True, slots=True, kw_only=True)
class PooledPoints:
    """The points of several runs of one server as one set (``plan calibrate RUN RUN...``):
    a profile fitted to runs spread over a session carries the server's speed over the
    session rather than over one run's minutes."""

    runs: tuple[RunPoints, ...]

    @property
    def observations(self) -> tuple[Observation, ...]:
        """Every run's points; a shape measured in several runs is their median."""
        return tuple(median_observations(o for run in self.runs for o in run.observations))

    @property
    def front_ends(self) -> tuple[float, ...]:
        return tuple(f for run in self.runs for f in run.front_ends)

    def front_end_share(self) -> FrontEndShare | None:
        """The share from every run's prefills with arrivals, against the pooled points
        and front end."""
        fronts = self.front_ends
        return front_end_share(
            [p for run in self.runs for p in run.overlapped],
            self.observations,
            statistics.median(fronts) if fronts else None,
        )

    def summary(self) -> str:
        """One line for the pool, after each run's own summary."""
        fronts = self.front_ends
        share = self.front_end_share()
        return (
            f"{len(self.runs)} runs pooled: {len(self.observations)} points"
            + (
                ""
                if not fronts
                else f"; front end, all runs: {ms_text(statistics.median(fronts))} ms a request "
                f"(median of {len(fronts)} alone)"
            )
            + ("" if share is None else f"; {share.said()}")
        )
