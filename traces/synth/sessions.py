"""Multi-turn conversations for synthetic traces: turn counts, think times, growing context.

A session's turn k (k >= 2) re-sends everything of turn k-1 (its prompt and, standing in
for the reply, ``output_tokens`` more tokens) plus a new user message, so its
``prefix_blocks`` start with turn k-1's blocks: replay then hits the prefix cache as a
real chat does. Imports nothing of the project but ``traces.synth.lengths``.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class SessionSpec:
    """How conversations unfold.

    ``turns_mean``: mean turns per session (geometric, at least 1; 1 means single-turn).
    ``think_mean_s``: mean seconds between a turn's arrival and the next turn's
    (exponential); it stands for the reply's generation plus the user's thinking, because a
    trace fixes arrival times before any server answers.
    """

    turns_mean: float = 4.0
    think_mean_s: float = 10.0

    def __post_init__(self) -> None:
        if self.turns_mean < 1 or self.think_mean_s < 0:
            raise ValueError("sessions need turns_mean >= 1 and think_mean_s >= 0")

    def turns(self, rng: random.Random) -> int:
        """A geometric number of turns with mean ``turns_mean``."""
        if self.turns_mean == 1:
            return 1
        p = 1.0 / self.turns_mean
        return 1 + math.floor(math.log(1.0 - rng.random()) / math.log(1.0 - p))

    def think(self, rng: random.Random) -> float:
        """Seconds from one turn's arrival to the next one's."""
        if self.think_mean_s == 0:
            return 0.0
        return rng.expovariate(1.0 / self.think_mean_s)


@dataclass(frozen=True, slots=True, kw_only=True)
class Turn:
    """One turn of a session before it becomes a trace row."""

    session: int
    turn: int
    arrival_s: float
    input_tokens: int
    output_tokens: int
    blocks: tuple[int, ...]
