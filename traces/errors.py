"""Exceptions of the trace and run file layer.

Tree::

    TraceError                      any problem with a trace or run file (exit code 2)
    ├── TraceFileError              missing, unreadable or not Parquet
    ├── SchemaError                 wrong or missing columns, wrong types
    ├── ValidationError             a value breaks a rule; names row and column
    ├── PromptError                 a prompt cannot be built with an exact token count
    ├── MissingExtraError           an optional dependency (Pillow, tokenizers) is missing
    └── importers.errors.*          source-format errors of the importers (their own module)

Every message is one line a user can act on: what is wrong and where.
"""

from __future__ import annotations


class TraceError(Exception):
    """Root of the trace layer's errors; ``exit_code`` is what the CLI returns."""

    exit_code = 2


class TraceFileError(TraceError):
    """The file is missing, unreadable or not a Parquet file."""


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
