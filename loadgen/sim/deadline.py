"""The simulator's wake-ups: ``loadgen.wakeup``'s timer, shared with the replay (this
module keeps the simulator's import path)."""

from __future__ import annotations

from loadgen.wakeup import (
    DeadlineTimer,
    SpinDeadlineTimer,
    TimerfdDeadlineTimer,
    make_deadline_timer,
)

__all__ = ["DeadlineTimer", "SpinDeadlineTimer", "TimerfdDeadlineTimer", "make_deadline_timer"]
