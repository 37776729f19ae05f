"""Reading source files in bounded batches and typing their columns, naming bad cells.

CSV files are read with pyarrow's streaming reader, every column as text, and converted
here so that a bad cell is reported as ``<file>: line L, column 'C': ...`` rather than as
Arrow's message. JSONL is read line by line; a JSON array (ShareGPT) is decoded one
element at a time from a sliding buffer. Nothing here holds a whole file.

Line numbers are 1-based file lines, assuming no newline inside a CSV field (true of every
format imported here). Imports pyarrow and the standard library only.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from traces.errors import TraceFileError
from traces.importers.errors import SourceError

_CSV_BLOCK_BYTES = 4 << 20


def check_source(path: Path) -> None:
    """Raise ``TraceFileError`` (one line) when the source is missing or not a file."""
    if not path.exists():
        raise TraceFileError(f"{path}: no such file")
    if not path.is_file():
        raise TraceFileError(f"{path}: is not a file")


@dataclass(frozen=True, slots=True, kw_only=True)
class CsvBatch:
    """A batch of CSV rows as text columns; ``first_line`` is the file line of its first row."""

    table: pa.Table
    first_line: int

    def lines(self) -> pa.Array:
        """The 1-based file line of each row."""
        return pa.array(range(self.first_line, self.first_line + self.table.num_rows), pa.int64())


def csv_header(path: Path) -> list[str]:
    """The column names of a CSV file's first line (BOM and surrounding spaces removed)."""
    check_source(path)
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            first = fh.readline()
    except (OSError, UnicodeDecodeError) as exc:
        raise TraceFileError(f"{path}: cannot read ({exc})") from exc
    if not first.strip():
        raise SourceError(path.name, line=1, column=None, problem="empty file, expected a header")
    return [name.strip() for name in first.rstrip("\r\n").split(",")]


def require_columns(path: Path, header: Sequence[str], required: Sequence[str], fmt: str) -> None:
    """Raise naming the first required column the header lacks (columns are read by name)."""
    for name in required:
        if name not in header:
            raise SourceError(
                path.name,
                line=1,
                column=name,
                problem=f"missing column for {fmt} (header has: {', '.join(header)})",
            )


def iter_csv(
    path: Path,
    columns: Sequence[str],
    *,
    header: Sequence[str] | None = None,
    block_bytes: int = _CSV_BLOCK_BYTES,
) -> Iterator[CsvBatch]:
    """Stream the named columns of a CSV file (with a header line) as text, batch by batch."""
    names = list(header) if header is not None else csv_header(path)
    read = pacsv.ReadOptions(block_size=block_bytes, skip_rows=1, column_names=names)
    convert = pacsv.ConvertOptions(
        column_types={name: pa.string() for name in names},
        include_columns=list(columns),
        strings_can_be_null=False,
    )
    try:
        reader = pacsv.open_csv(path, read_options=read, convert_options=convert)
    except (pa.ArrowInvalid, OSError) as exc:
        raise _structure_error(path, len(names), 2, exc) from exc
    line = 2
    while True:
        try:
            batch = reader.read_next_batch()
        except StopIteration:
            return
        except (pa.ArrowInvalid, OSError) as exc:
            raise _structure_error(path, len(names), line, exc) from exc
        table = pa.Table.from_batches([batch])
        yield CsvBatch(table=table, first_line=line)
        line += table.num_rows


def _structure_error(path: Path, n_columns: int, from_line: int, exc: BaseException) -> SourceError:
    """Name the first line from ``from_line`` whose field count differs from the header's.

    Runs only after Arrow rejected a block, so the extra pass over the file costs nothing
    on good input.
    """
    try:
        with path.open(encoding="utf-8-sig", newline="") as fh:
            for number, row in enumerate(csv.reader(fh), start=1):
                if number >= from_line and row and len(row) != n_columns:
                    return SourceError(
                        path.name,
                        line=number,
                        column=None,
                        problem=f"expected {n_columns} fields as in the header, got {len(row)}",
                    )
    except (OSError, UnicodeDecodeError, csv.Error):
        pass
    return SourceError(path.name, line=None, column=None, problem=_one_line(exc))


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())


def _first_bad(values: pa.Array | pa.ChunkedArray, ok: pa.Array | pa.ChunkedArray) -> int:
    filled = pc.fill_null(ok, False)
    return int(pc.index(filled, False).as_py())


def to_int(col: pa.ChunkedArray, *, where: str, column: str, first_line: int) -> pa.Array:
    """Parse a text column as int64; a blank or non-integer cell is an error naming its line."""
    text = pc.utf8_trim_whitespace(col)
    try:
        return pc.cast(text, pa.int64()).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        ok = pc.match_substring_regex(text, r"^[+-]?\d{1,18}$")
        i = _first_bad(text, ok)
        raise SourceError(
            where, line=first_line + i, column=column, problem=f"not an integer: {col[i].as_py()!r}"
        ) from exc


def to_float(col: pa.ChunkedArray, *, where: str, column: str, first_line: int) -> pa.Array:
    """Parse a text column as float64; a blank or non-numeric cell is an error naming its line."""
    text = pc.utf8_trim_whitespace(col)
    try:
        values = pc.cast(text, pa.float64()).combine_chunks()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
        ok = pc.match_substring_regex(text, r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
        i = _first_bad(text, ok)
        raise SourceError(
            where, line=first_line + i, column=column, problem=f"not a number: {col[i].as_py()!r}"
        ) from exc
    bad = pc.invert(pc.is_finite(values))
    if pc.any(bad).as_py():
        i = int(pc.index(bad, True).as_py())
        raise SourceError(
            where,
            line=first_line + i,
            column=column,
            problem=f"not a finite number: {col[i].as_py()!r}",
        )
    return values


def to_epoch_ns(
    col: pa.ChunkedArray, *, where: str, column: str, first_line: int
) -> tuple[pa.Array, bool]:
    """Parse ISO-8601 datetimes into int64 nanoseconds; returns (values, has_zone).

    Accepts a space or ``T`` separator, 0 to 9 fractional digits (Azure 2023 has 7, Azure
    2024 mixes 0 and 6 in one file) and, when present, a zone offset or ``Z`` (converted to
    UTC). Naive values are read as wall-clock time without a zone. A batch mixing naive and
    zoned values, or any unparsable cell, is an error naming the first bad line.
    """
    text = pc.utf8_trim_whitespace(col)
    for zone in (None, "UTC"):
        try:
            stamps = pc.cast(text, pa.timestamp("ns", tz=zone))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            continue
        return pc.cast(stamps, pa.int64()).combine_chunks(), zone is not None
    # Locate the first cell that parses in neither form (or the first that switches form).
    values = text.to_pylist()
    seen_zone: bool | None = None
    for i, value in enumerate(values):
        zone_ok: bool | None = None
        for zone in (None, "UTC"):
            try:
                pa.array([value], pa.string()).cast(pa.timestamp("ns", tz=zone))
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                continue
            zone_ok = zone is not None
            break
        if zone_ok is None:
            raise SourceError(
                where,
                line=first_line + i,
                column=column,
                problem=f"not an ISO-8601 date-time: {value!r}",
            )
        if seen_zone is not None and zone_ok != seen_zone:
            raise SourceError(
                where,
                line=first_line + i,
                column=column,
                problem=f"{value!r} mixes time-zone-aware and naive date-times in one file",
            )
        seen_zone = zone_ok
    raise SourceError(where, line=first_line, column=column, problem="unparsable date-times")


def iter_jsonl(path: Path) -> Iterator[tuple[int, Any]]:
    """Yield (line number, decoded value) for each non-blank line of a JSONL file."""
    check_source(path)
    try:
        with path.open(encoding="utf-8") as fh:
            for number, text in enumerate(fh, start=1):
                if not text.strip():
                    continue
                try:
                    yield number, json.loads(text)
                except json.JSONDecodeError as exc:
                    raise SourceError(
                        path.name, line=number, column=None, problem=f"invalid JSON ({exc.msg})"
                    ) from exc
    except UnicodeDecodeError as exc:
        raise TraceFileError(f"{path}: not UTF-8 text ({exc.reason})") from exc


def iter_json_array(path: Path, chunk_chars: int = 1 << 20) -> Iterator[tuple[int, Any]]:
    """Yield (line number, element) for each element of a top-level JSON array, streaming.

    Elements are decoded one at a time from a sliding text buffer, so a 600 MB ShareGPT file
    needs memory for one conversation, not for the file.
    """
    check_source(path)
    decoder = json.JSONDecoder()
    buf = ""
    pos = 0
    line = 1
    eof = False
    started = False
    with path.open(encoding="utf-8") as fh:

        def fill() -> bool:
            nonlocal buf, pos, eof
            chunk = fh.read(chunk_chars)
            if not chunk:
                eof = True
                return False
            buf = buf[pos:] + chunk
            pos = 0
            return True

        def skip_ws() -> None:
            nonlocal pos, line
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n":
                    if buf[pos] == "\n":
                        line += 1
                    pos += 1
                if pos < len(buf) or eof or not fill():
                    return

        skip_ws()
        if pos >= len(buf) or buf[pos] != "[":
            raise SourceError(path.name, line=line, column=None, problem="expected a JSON array")
        pos += 1
        started = True
        expect_value = True
        while started:
            skip_ws()
            if pos >= len(buf):
                raise SourceError(
                    path.name, line=line, column=None, problem="unterminated JSON array"
                )
            char = buf[pos]
            if char == "]":
                return
            if char == ",":
                if expect_value:
                    raise SourceError(path.name, line=line, column=None, problem="unexpected ','")
                pos += 1
                expect_value = True
                continue
            if not expect_value:
                raise SourceError(path.name, line=line, column=None, problem="expected ',' or ']'")
            while True:
                try:
                    value, end = decoder.raw_decode(buf, pos)
                except json.JSONDecodeError as exc:
                    if not eof and fill():
                        continue
                    bad_line = line + buf.count("\n", pos, exc.pos)
                    raise SourceError(
                        path.name, line=bad_line, column=None, problem=f"invalid JSON ({exc.msg})"
                    ) from exc
                if end >= len(buf) and not eof and fill():
                    # A number at the buffer's end may continue in the next chunk.
                    continue
                break
            start_line = line
            line += buf.count("\n", pos, end)
            pos = end
            expect_value = False
            yield start_line, value
