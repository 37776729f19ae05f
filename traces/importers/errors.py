"""Exceptions raised while importing a public trace format.

Tree (under ``traces.errors.TraceError``, itself a ``UserError``; exit code 2)::

    UserError                       (traces.errors)
    └── TraceError
        ├── TraceFileError          (traces.errors) the source file is missing or unreadable
        ├── ValidationError         (traces.errors)
        │   └── SourceError         a value of the source file is bad; names file, line, column
        └── ImportOptionError       an option is invalid or does not apply to the format

Messages are one line: ``<file>: line <n>, column '<name>': <what is wrong>``.
"""

from __future__ import annotations

from traces.errors import TraceError, ValidationError


class SourceError(ValidationError):
    """A bad value in a source file: ``row`` is its 1-based line, ``column`` its source column."""

    def __init__(self, where: str, *, line: int | None, column: str | None, problem: str) -> None:
        parts = [where]
        if line is not None:
            parts.append(f"line {line}")
        if column is not None:
            parts.append(f"column {column!r}")
        head = ": ".join(parts[:1]) + (": " + ", ".join(parts[1:]) if len(parts) > 1 else "")
        super().__init__(f"{head}: {problem}", row=line, column=column)
        self.line = line


class ImportOptionError(TraceError):
    """An import option has a bad value or does not apply to the chosen format."""
