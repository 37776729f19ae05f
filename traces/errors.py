"""Exceptions of the trace and run file layer, and ``UserError``, the base of every
package's errors.

``UserError`` lives here because every package may import ``traces``: each package's root
subclasses it, and the CLI turns any ``UserError`` into one stderr line and its
``exit_code`` (by ``isinstance``, never by the module it came from). Anything else is a
bug and keeps its traceback.

Tree::

    UserError                       a failure the user can act on; exit_code (2 by default)
    ├── traces.errors.TraceError                (below)
    ├── loadgen.errors.LoadgenError             the replay engine and the simulator
    └── analyzers.errors.AnalyzerError          metrics, gates, the budget model

    TraceError                      any problem with a trace or run file (exit code 2)
    ├── TraceFileError              missing, unreadable or not Parquet
    │   └── RunInfoError            run.json does not match its schema; names the key
    │       └── NewerRunInfoError   run.json written by a newer llm-loadgen
    ├── SchemaError                 wrong or missing columns, wrong types
    ├── ValidationError             a value breaks a rule; names row and column
    │   └── importers.errors.SourceError    a bad value in a source file (file, line, column)
    ├── PromptError                 a prompt cannot be built with an exact token count
    ├── MissingExtraError           an optional dependency (Pillow, tokenizers) is missing
    ├── TransformError              slice/scale/merge parameters do not fit the trace
    └── importers.errors.ImportOptionError      an import option is bad for the format

Every message is one line a user can act on: what is wrong and where; ``shown`` puts a
value from outside into one with a bounded length. This module imports nothing.
"""

from __future__ import annotations

from typing import ClassVar


class UserError(Exception):
    """Base of every package's errors: a failure the user can act on.

    ``exit_code`` is what the CLI returns (README's exit-code table); subclasses override it.
    """

    exit_code: ClassVar[int] = 2


class TraceError(UserError):
    """Root of the trace layer's errors; ``exit_code`` is what the CLI returns."""

    exit_code = 2


class TraceFileError(TraceError):
    """The file is missing, unreadable or not a Parquet file."""


class RunInfoError(TraceFileError):
    """A ``run.json`` is not valid JSON or does not match its schema version; the message
    names the key."""


class NewerRunInfoError(RunInfoError):
    """A ``run.json`` was written by a newer llm-loadgen (a higher ``schema_version`` than
    this one reads): bad input for this version, not a broken run."""


class DeploymentError(TraceError):
    """A deployment description (``deployment.toml``, or one a run recorded) is unreadable
    or has an unknown key or a bad value; the message names the key and the file."""


class SchemaError(TraceError):
    """The table's columns or types do not match the schema."""


class ValidationError(TraceError):
    """A value breaks a rule of the schema.

    ``row`` is the 0-based row index and ``column`` the column name of the first bad value.
    """

    def __init__(self, message: str, *, row: int | None = None, column: str | None = None):
        super().__init__(message)
        self.row = row
        self.column = column


class PromptError(TraceError):
    """A prompt cannot be built with an exact token count (e.g. a tokenizer merges words)."""


class MissingExtraError(TraceError, ImportError):
    """An optional dependency (Pillow, tokenizers) is not installed; the message says which
    extra to install."""


class TransformError(TraceError):
    """A transformation's parameters do not fit the trace (e.g. an empty slice)."""


def shown(value: object, limit: int = 60) -> str:
    """``repr(value)`` cut to about ``limit`` characters, for a one-line message about a
    value that came from outside (a server may send a megabyte where a number belongs)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text)} chars)"
