"""File descriptors for a run's connections: the process's ``RLIMIT_NOFILE`` against the
connections the run may open.

Every connection is a socket, and a process opens at most its soft ``RLIMIT_NOFILE`` files;
beyond it a connect fails with EMFILE (a ``connect_error`` row) and so does opening any of
the run's own files (the journal, the merge into ``requests.parquet``). Before a run,
``ensure_descriptors`` raises the soft limit to what the connections need, which any
process may do up to its hard limit, or refuses the run with one line naming the number
and ``ulimit -n``. The limit is per process: with ``--workers`` each shard needs its share,
and spawned workers inherit the parent's limit.

Where ``resource`` does not exist (Windows) nothing is checked. Imports nothing of ours but
the errors.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from loadgen.errors import ConfigError

try:
    import resource
except ImportError:  # not a POSIX system: no limit to check
    resource = None  # type: ignore[assignment]

RESERVE = 32
"""Descriptors kept beyond those open when the check runs, for the files and sockets a run
opens besides its connections: the journal and the merge, the metrics scraper's
connection, the event loop's own."""
_OPEN_UNKNOWN = 32
"""Descriptors assumed open where the system does not list them (no ``/proc/self/fd``)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class DescriptorLimit:
    """What ``ensure_descriptors`` found and did; ``None`` limits are unlimited."""

    needed: int
    soft_before: int | None
    soft: int | None
    hard: int | None

    @property
    def raised(self) -> bool:
        return self.soft != self.soft_before


def open_descriptors() -> int:
    """How many files this process has open now (an estimate where it cannot list them)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the one listdir opened
    except OSError:
        return _OPEN_UNKNOWN


def ensure_descriptors(connections: int, *, planned_by: str | None) -> DescriptorLimit | None:
    """Make room for ``connections`` sockets beside the files open now and ``RESERVE``.

    ``planned_by`` names the option that fixed the number (``"--concurrency 1000"``): when
    even the hard limit is too low, ``ConfigError`` refuses the run, naming the number and
    ``ulimit -n``. None means the number is only the most the run could open (an open loop
    without ``--max-inflight`` has one connection per request at most): the soft limit is
    then raised as far as the hard one allows and the run goes ahead; a connect that meets
    the limit is a ``connect_error`` row. Returns None where there is no ``resource``."""
    if resource is None:
        return None
    needed = open_descriptors() + connections + RESERVE
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    unlimited = resource.RLIM_INFINITY
    if soft == unlimited or soft >= needed:
        return DescriptorLimit(
            needed=needed, soft_before=_limit(soft), soft=_limit(soft), hard=_limit(hard)
        )
    target = needed if hard == unlimited or hard >= needed else hard
    if target < needed and planned_by is not None:
        raise ConfigError(
            f"{planned_by} needs about {needed} open files (one per connection and "
            f"{needed - connections} for the run itself) but this process may open {soft} "
            f"(hard limit {hard}): raise it with `ulimit -n {needed}`, or lower the number"
        )
    if target > soft:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (OSError, ValueError) as exc:
            if planned_by is not None:
                raise ConfigError(
                    f"{planned_by} needs about {needed} open files but this process may open "
                    f"{soft} and could not raise it ({exc}): raise it with `ulimit -n {needed}`"
                ) from exc
            target = soft
    return DescriptorLimit(needed=needed, soft_before=soft, soft=_limit(target), hard=_limit(hard))


def _limit(value: int) -> int | None:
    return None if resource is None or value == resource.RLIM_INFINITY else value
