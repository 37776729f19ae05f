"""Rules each value of a trace must satisfy (``find_bad_value``), and the bounds behind
them: every value the replay will send or use must be one it can send, so that no row
stops a run midway and nothing of a trace reaches the wire unchecked.

The table's own rules (required values present, arrivals ordered, ids unique) are in
``traces.validate``, which applies these too; the importers' sink applies them to each
batch of a source. docs/traces.md lists the rules. Imports pyarrow and ``traces`` only.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from traces import schema as s
from traces.prompts.images import MAX_SIDE

ID_CHARS: Final = "visible ASCII (0x21-0x7E)"
"""What a request id may hold: it goes out in the ``X-Request-Id`` header, where CR, LF or
NUL would end the header early (header injection) and anything outside visible ASCII is
either refused by HTTP clients or altered by servers (spaces trimmed), breaking the join."""
_NOT_ID_CHAR: Final = r"[^\x21-\x7e]"
MESSAGES_MAX_DEPTH: Final = 64
"""Nesting levels a ``messages`` value may have: real ones have about five, and the request
body's encoder (orjson) refuses documents nested about 250 deep."""
MAX_TOKENS: Final = 10_000_000
"""Most tokens a request's ``input_tokens``, ``output_tokens`` or ``image_tokens`` may
count. No served model takes a longer context (the longest advertised, Llama 4 Scout's, is
10M), and prompt materialisation builds a prompt in memory: about 7 bytes a token of text,
a list of its words and the JSON body, a few hundred MB at this bound. A larger count would
stop the replay midway (out of memory) or ask for what no server can do."""
MAX_IMAGES: Final = 1_000
"""Most images one request may carry (the run table counts them in an int16; real APIs
take tens to a few hundred)."""
MAX_IMAGE_PIXELS: Final = MAX_SIDE * MAX_SIDE
"""Most pixels one request's images may add up to: one image of the largest size. Each is
rendered and encoded in memory before the request is due (3 bytes a pixel while drawn)."""
MAX_ARRIVAL_S: Final = 1e9
"""Latest arrival time, in seconds (about 31.7 years): a due time is the run's start plus
the arrival in epoch nanoseconds, which an int64 holds until the year 2262."""
MAX_ID_CHARS: Final = 1024
"""Longest request id: it goes out in a header, and servers refuse header lines of a few
KiB (8 KiB is common) with 431, so a longer id could never be served."""
SHOWN: Final = 60
"""Characters of a bad value shown in a message (values can be megabytes)."""
_CHAR_NAMES: Final = {"\r": "CR", "\n": "LF", "\x00": "NUL", "\t": "TAB", " ": "a space"}
_LONE_SURROGATE: Final = re.compile(r"\\u[dD][89a-fA-F]")
"""A JSON escape of a UTF-16 surrogate: only those can decode to a lone surrogate, which
the request body's encoder cannot write."""


def first_true(mask: pa.ChunkedArray | pa.Array) -> int | None:
    """Index of the first true value of a boolean array (nulls count as false)."""
    filled = pc.fill_null(mask, False)
    if not pc.any(filled).as_py():
        return None
    return int(pc.index(filled, True).as_py())


@dataclass(frozen=True, slots=True, kw_only=True)
class BadValue:
    """The first value a rule refuses: its 0-based row, its column and what is wrong."""

    row: int
    column: str
    problem: str


def show_value(value: str) -> str:
    """A value for a one-line message: escaped, and cut when long."""
    if len(value) <= SHOWN:
        return repr(value)
    return repr(value[:SHOWN]) + f"... ({len(value)} characters)"


def _char_name(char: str) -> str:
    name = _CHAR_NAMES.get(char)
    if name is not None:
        return name
    return f"{char!r} (U+{ord(char):04X})"


def id_problem(value: str) -> str | None:
    """Why ``value`` cannot go into an ``X-Request-Id`` header, or None when it can: its
    first character outside ``ID_CHARS`` and where it is."""
    for pos, char in enumerate(value):
        if not "\x21" <= char <= "\x7e":
            return f"has {_char_name(char)} at position {pos}"
    return None


def _bad_request_id(ids: pa.ChunkedArray | pa.Array) -> BadValue | None:
    bad = first_true(pc.match_substring_regex(ids, _NOT_ID_CHAR))
    if bad is None:
        long = first_true(pc.greater(pc.utf8_length(ids), MAX_ID_CHARS))
        if long is None:
            return None
        return BadValue(
            row=long,
            column=s.REQUEST_ID,
            problem=(
                f"request id {show_value(str(ids[long].as_py()))} is longer than {MAX_ID_CHARS} "
                "characters: it is sent as the X-Request-Id header, and servers refuse "
                "longer header lines"
            ),
        )
    value = str(ids[bad].as_py())
    return BadValue(
        row=bad,
        column=s.REQUEST_ID,
        problem=(
            f"request id {show_value(value)} {id_problem(value)}: the id is sent as the "
            f"X-Request-Id header, which takes {ID_CHARS} only"
        ),
    )


def _reject_constant(name: str) -> float:
    raise ValueError(f"{name} is not a JSON number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _int64(text: str) -> int:
    value = int(text)
    if not -(2**63) <= value < 2**64:
        raise ValueError(f"integer {text[:20]}... does not fit in 64 bits")
    return value


def _depth(doc: object) -> int:
    """Nesting levels of a parsed JSON document (a scalar is 0), without recursion."""
    deepest = 0
    stack: list[tuple[object, int]] = [(doc, 0)]
    while stack:
        node, level = stack.pop()
        if isinstance(node, dict):
            node = list(node.values())
        if isinstance(node, list):
            level += 1
            deepest = max(deepest, level)
            if deepest > MESSAGES_MAX_DEPTH:
                break
            stack.extend((child, level) for child in node)
    return deepest


def messages_problem(text: str) -> str | None:
    """Why ``text`` cannot be sent as a chat request's ``messages``, or None when it can.

    It must be strict JSON (no ``NaN``/``Infinity``, numbers a double or 64-bit integer
    holds, no lone surrogate escapes), a non-empty array of objects, nested at most
    ``MESSAGES_MAX_DEPTH`` deep: what the request body's encoder accepts."""
    doc, problem = _strict_json(text)
    if problem is not None:
        return problem
    if not isinstance(doc, list):
        return f"must be a JSON array of message objects, got a JSON {_json_kind(doc)}"
    if not doc:
        return "must be a non-empty JSON array of message objects, got []"
    for i, item in enumerate(doc):
        if not isinstance(item, dict):
            return f"message {i} is a JSON {_json_kind(item)}, expected an object"
    return _unsendable(doc, text)


def _unsendable(doc: object, text: str) -> str | None:
    """What the body's encoder refuses in parsed JSON ``doc`` (of ``text``): nesting
    beyond ``MESSAGES_MAX_DEPTH``, an unpaired surrogate escape."""
    if (text.count("[") + text.count("{") > MESSAGES_MAX_DEPTH) and (
        _depth(doc) > MESSAGES_MAX_DEPTH
    ):
        return f"nested deeper than {MESSAGES_MAX_DEPTH} levels"
    if _LONE_SURROGATE.search(text):
        try:
            json.dumps(doc, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            return "a string holds an unpaired UTF-16 surrogate escape (\\uD800-\\uDFFF)"
    return None


def _strict_json(text: str) -> tuple[object, str | None]:
    """``text`` parsed as strict JSON, or why it is not."""
    try:
        doc = json.loads(
            text,
            parse_constant=_reject_constant,
            parse_float=_finite_float,
            parse_int=_int64,
        )
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc.msg} at character {exc.pos})"
    except (ValueError, RecursionError) as exc:
        return None, f"not valid JSON ({exc})" if str(exc) else "not valid JSON (nested too deep)"
    return doc, None


def tools_problem(text: str) -> str | None:
    """Why ``text`` cannot be sent as a chat request's ``tools``, or None when it can: a
    JSON array of OpenAI function tools, each an object with ``"type": "function"`` and a
    ``function`` object whose ``name`` is a non-empty string (the rest, ``description``
    and ``parameters``, goes as given), subject to ``messages_problem``'s JSON rules."""
    doc, problem = _strict_json(text)
    if problem is not None:
        return problem
    if not isinstance(doc, list):
        return f"must be a JSON array of tool objects, got a JSON {_json_kind(doc)}"
    for i, tool in enumerate(doc):
        if not isinstance(tool, dict):
            return f"tool {i} is a JSON {_json_kind(tool)}, expected an object"
        if tool.get("type") != "function":
            return f'tool {i}: "type" must be "function", got {json.dumps(tool.get("type"))}'
        function = tool.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if not isinstance(name, str) or not name:
            return f"tool {i}: needs a function object with a non-empty string name"
    return _unsendable(doc, text)


def _json_kind(value: object) -> str:
    if isinstance(value, dict):
        return "object"
    if isinstance(value, list):
        return "array"
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if value is None:
        return "null"
    return "number"


def _bad_messages(values: pa.ChunkedArray | pa.Array) -> BadValue | None:
    for row, text in enumerate(values.to_pylist()):
        if text is None:
            continue
        problem = messages_problem(text)
        if problem is not None:
            return BadValue(row=row, column=s.MESSAGES, problem=f"messages {problem}")
    return None


def _bad_tools(values: pa.ChunkedArray | pa.Array) -> BadValue | None:
    for row, text in enumerate(values.to_pylist()):
        if text is None:
            continue
        problem = tools_problem(text)
        if problem is not None:
            return BadValue(row=row, column=s.TOOLS, problem=f"tools {problem}")
    return None


def _bad_slo(column: str, values: pa.ChunkedArray | pa.Array) -> BadValue | None:
    as_float = pc.cast(values, pa.float64())
    bad = first_true(pc.invert(pc.and_(pc.greater(as_float, 0.0), pc.is_finite(as_float))))
    if bad is None:
        return None
    return BadValue(
        row=bad,
        column=column,
        problem=f"an SLO must be a positive, finite number of ms, got {values[bad].as_py()}",
    )


def _bad_sampling(table: pa.Table, names: set[str]) -> BadValue | None:
    """A sampling value no engine takes: a temperature that is negative or not finite, a
    top_p outside (0, 1], a negative min_tokens or one above the row's output_tokens
    (its max_tokens: vLLM refuses min_tokens > max_tokens)."""
    if s.TEMPERATURE in names:
        values = pc.cast(table.column(s.TEMPERATURE), pa.float64())
        bad = first_true(pc.invert(pc.and_(pc.greater_equal(values, 0.0), pc.is_finite(values))))
        if bad is not None:
            return BadValue(
                row=bad,
                column=s.TEMPERATURE,
                problem=f"temperature must be a finite number >= 0, got {values[bad].as_py()}",
            )
    if s.TOP_P in names:
        values = pc.cast(table.column(s.TOP_P), pa.float64())
        bad = first_true(pc.invert(pc.and_(pc.greater(values, 0.0), pc.less_equal(values, 1.0))))
        if bad is not None:
            return BadValue(
                row=bad,
                column=s.TOP_P,
                problem=f"top_p must be in (0, 1], got {values[bad].as_py()}",
            )
    if s.MIN_TOKENS in names:
        values = table.column(s.MIN_TOKENS)
        too_big = (
            pc.greater(values, table.column(s.OUTPUT_TOKENS))
            if s.OUTPUT_TOKENS in names
            else pc.greater(values, MAX_TOKENS)
        )
        bad = first_true(pc.or_(pc.less(values, 0), too_big))
        if bad is not None:
            return BadValue(
                row=bad,
                column=s.MIN_TOKENS,
                problem=(
                    f"min_tokens must be 0..output_tokens (the request's max_tokens), "
                    f"got {values[bad].as_py()}"
                ),
            )
    return None


def _bad_image_tokens(values: pa.ChunkedArray | pa.Array) -> BadValue | None:
    bad = first_true(pc.or_(pc.less(values, 0), pc.greater(values, MAX_TOKENS)))
    if bad is None:
        return None
    return BadValue(
        row=bad,
        column=s.IMAGE_TOKENS,
        problem=f"image tokens must be 0..{MAX_TOKENS:,}, got {values[bad].as_py()}",
    )


def bad_size(column: str, values: pa.ChunkedArray | pa.Array) -> BadValue | None:
    """A token count beyond ``MAX_TOKENS`` (the table rules refuse those not positive)."""
    bad = first_true(pc.greater(values, MAX_TOKENS))
    if bad is None:
        return None
    return BadValue(
        row=bad,
        column=column,
        problem=(
            f"{values[bad].as_py():,} tokens is more than {MAX_TOKENS:,}, the most a request "
            "may count (no model serves a longer context, and the prompt is built in memory)"
        ),
    )


def bad_arrival(values: pa.ChunkedArray | pa.Array) -> BadValue | None:
    """An arrival time beyond ``MAX_ARRIVAL_S`` (the table rules refuse negative ones)."""
    bad = first_true(pc.greater(values, MAX_ARRIVAL_S))
    if bad is None:
        return None
    return BadValue(
        row=bad,
        column=s.ARRIVAL_S,
        problem=(
            f"arrival time {values[bad].as_py()} s is later than {MAX_ARRIVAL_S:.0e} s "
            "(about 31 years), beyond what a run's clock can schedule"
        ),
    )


def _bad_images(values: pa.ChunkedArray | pa.Array) -> BadValue | None:
    """Each image of each list: present, and 1..MAX_SIDE pixels a side."""
    flat = pc.list_flatten(values)
    if len(flat) == 0:
        return None
    parents = pc.list_parent_indices(values)
    if isinstance(flat, pa.ChunkedArray):
        flat = flat.combine_chunks()
    if isinstance(parents, pa.ChunkedArray):
        parents = parents.combine_chunks()
    width = pc.struct_field(flat, [0])
    height = pc.struct_field(flat, [1])

    def outside(side: pa.Array) -> pa.Array:
        # Kleene: a missing side is true (bad), not null (skipped).
        return pc.or_kleene(pc.is_null(side), pc.or_(pc.less(side, 1), pc.greater(side, MAX_SIDE)))

    bad = first_true(pc.or_(outside(width), outside(height)))
    if bad is None:
        return _too_many_images(values, width, height)
    row = int(parents[bad].as_py())
    first = first_true(pc.equal(parents, row)) or 0
    shown = (
        "missing"
        if not flat[bad].is_valid
        else f"{width[bad].as_py()}x{height[bad].as_py()} pixels"
    )
    return BadValue(
        row=row,
        column=s.IMAGES,
        problem=f"image {bad - first} is {shown}; each side must be 1..{MAX_SIDE} pixels",
    )


def _too_many_images(
    values: pa.ChunkedArray | pa.Array, width: pa.Array, height: pa.Array
) -> BadValue | None:
    """A request with more than ``MAX_IMAGES`` images, or more than ``MAX_IMAGE_PIXELS``
    pixels in all (every side already checked to be 1..MAX_SIDE)."""
    counts = pc.list_value_length(values)
    bad = first_true(pc.greater(counts, MAX_IMAGES))
    if bad is not None:
        return BadValue(
            row=bad,
            column=s.IMAGES,
            problem=f"{counts[bad].as_py():,} images; a request may carry at most {MAX_IMAGES:,}",
        )
    pixels = pc.multiply(pc.cast(width, pa.int64()), pc.cast(height, pa.int64()))
    # Each row's pixels: differences of the running sum at the rows' ends and starts.
    running = pa.concat_arrays([pa.array([0], pa.int64()), pc.cumulative_sum(pixels)])
    ends = pc.cumulative_sum(pc.cast(pc.fill_null(counts, 0), pa.int64()))
    starts = pc.subtract(ends, pc.cast(pc.fill_null(counts, 0), pa.int64()))
    sums = pc.subtract(pc.take(running, ends), pc.take(running, starts))
    row = first_true(pc.greater(sums, MAX_IMAGE_PIXELS))
    if row is None:
        return None
    total = int(sums[row].as_py())
    return BadValue(
        row=row,
        column=s.IMAGES,
        problem=(
            f"the images add up to {total:,} pixels; a request may carry at most "
            f"{MAX_IMAGE_PIXELS:,} (one {MAX_SIDE}x{MAX_SIDE} image), each drawn in memory"
        ),
    )


def _bad_prefix_blocks(values: pa.ChunkedArray | pa.Array) -> BadValue | None:
    flat = pc.list_flatten(values)
    bad = first_true(pc.is_null(flat))
    if bad is None:
        return None
    parents = pc.list_parent_indices(values)
    return BadValue(
        row=int(parents[bad].as_py()),
        column=s.PREFIX_BLOCKS,
        problem="a block id is null; block ids are integers",
    )


_TableCheck = Callable[[pa.Table, set[str]], "BadValue | None"]


def _on_column(column: str, check: Callable[[pa.ChunkedArray], BadValue | None]) -> _TableCheck:
    """``check`` of ``column``, where the table has it (an importer's batch may not)."""

    def run(table: pa.Table, names: set[str]) -> BadValue | None:
        return check(table.column(column)) if column in names else None

    return run


# The checks of ``find_bad_value``, in the order a table's values are checked.
_CHECKS: Final[tuple[_TableCheck, ...]] = (
    _on_column(s.REQUEST_ID, _bad_request_id),
    _on_column(s.MESSAGES, _bad_messages),
    _on_column(s.TOOLS, _bad_tools),
    _on_column(s.SLO_TTFT_MS, partial(_bad_slo, s.SLO_TTFT_MS)),
    _on_column(s.SLO_TPOT_MS, partial(_bad_slo, s.SLO_TPOT_MS)),
    _bad_sampling,
    _on_column(s.IMAGE_TOKENS, _bad_image_tokens),
    _on_column(s.IMAGES, _bad_images),
    _on_column(s.PREFIX_BLOCKS, _bad_prefix_blocks),
)


def find_bad_value(table: pa.Table) -> BadValue | None:
    """The first value, by column then row, that the replay could not send or use: a
    request id that is not visible ASCII or longer than ``MAX_ID_CHARS``, ``messages``
    that are not an array of JSON objects, ``tools`` that are not an array of function
    tools (``tools_problem``), an SLO that is not a positive finite number, image tokens
    outside 0..MAX_TOKENS, an image side outside 1..MAX_SIDE, more than ``MAX_IMAGES``
    images or ``MAX_IMAGE_PIXELS`` pixels in one request, a null block id, a sampling value
    no engine takes (``_bad_sampling``). Columns the
    table lacks are skipped, so an importer's batch with trace columns of any compatible
    type can be checked too."""
    names = set(table.column_names)
    for check in _CHECKS:
        found = check(table, names)
        if found is not None:
            return found
    return None
