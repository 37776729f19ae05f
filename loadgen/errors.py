"""Exceptions of the replay engine, the simulator and their CLI.

Tree::

    UserError                     (traces.errors) base of every package's errors
    └── LoadgenError              root; ``exit_code`` is what the CLI returns
        ├── ConfigError           bad option or configuration value, the simulator's too (2)
        ├── EndpointError         the endpoint is unreachable, rejects the key or the model (4)
        ├── RecorderError         the run's rows could not be written or merged; what was
        │                         written stays readable (4)
        ├── RunDirError           the run directory cannot be created or is not empty (2)
        │   └── RunLiveError      a replay process still writes the run (``recover``, or a
        │                         second replay into it) (2)
        ├── WorkerDiedError       a ``--workers`` shard process died; what it journaled is
        │                         merged and the run marked ``incomplete`` (4)
        ├── PrepareAheadError     the body preparer process (``loadgen.prepare.ahead``)
        │                         died or did not start (4)
        └── SimError              inside the simulator's server: answered over HTTP, they
            │                     reach no command line
            ├── RequestError      a request body the simulator refuses: HTTP 400, ``param``
            │   │                 names the field
            │   └── PromptShapeError  prompt or messages of a shape it cannot count
            └── DroppedConnection a drop fault: the server aborts the connection mid-body

Failures of single requests are never exceptions on the client: they are rows with an
``outcome``. This module imports only ``traces.errors``.
"""

from __future__ import annotations

from traces.errors import UserError


class LoadgenError(UserError):
    """Root of the replay engine's and the simulator's errors."""

    exit_code = 2


class ConfigError(LoadgenError):
    """An option or configuration value is invalid."""


class EndpointError(LoadgenError):
    """The endpoint cannot serve the run (unreachable, bad key, unknown model)."""

    exit_code = 4


class RecorderError(LoadgenError):
    """The run's rows could not be written (a full disk, say, or a row the record builder
    let through) or their journal not merged into ``requests.parquet``. The run stops
    dispatching; the rows written before stay readable, the journal in place."""

    exit_code = 4


class RunDirError(LoadgenError):
    """The run directory cannot be used."""


class RunLiveError(RunDirError):
    """A replay process still holds the run directory (``loadgen.run.runlock``): it cannot
    be recovered, or replayed into, under its feet. ``holder`` says which (pid, host)."""

    def __init__(self, message: str, *, holder: str = "another process") -> None:
        super().__init__(message)
        self.holder = holder


class WorkerDiedError(LoadgenError):
    """A worker process (shard) of a ``--workers`` run died (killed, crashed): an
    infrastructure failure, not bad input. ``shard`` is the first that died."""

    exit_code = 4

    def __init__(self, message: str, *, shard: int) -> None:
        super().__init__(message)
        self.shard = shard


class PrepareAheadError(LoadgenError):
    """The process that builds request bodies ahead of their due times died or did not
    start (``loadgen.prepare.ahead``): an infrastructure failure, not bad input."""

    exit_code = 4


class SimError(LoadgenError):
    """Raised inside the simulator's request handling; the app turns it into an HTTP answer
    (or a dropped connection), so it never reaches the CLI."""


class RequestError(SimError):
    """The body is not a valid request; ``str()`` is the message for the 400 answer and
    ``param`` the request field at fault, when one is."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


class PromptShapeError(RequestError):
    """The prompt or messages have a shape the simulator cannot count; the message says why.

    Raised by the token counter, which does not know the field's name; the request parser
    re-raises it as a ``RequestError`` naming ``prompt`` or ``messages``."""


class DroppedConnection(SimError):
    """Raised by the app to have the server abort the connection mid-body (a drop fault)."""
