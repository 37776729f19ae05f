"""The value rules of trace validation: what the replay would send or use is checked before
the first request, and a refusal names its row and column in one line.

The properties draw random strings into the columns a trace author controls and check both
directions: a refused value is named by row and column, and an accepted value is one the
replay can send (a header value without CR/LF/NUL, messages the body's encoder accepts).
"""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from traces import schema as s
from traces.errors import ValidationError
from traces.importers.base import ImportOptions
from traces.importers.errors import SourceError
from traces.importers.registry import import_trace
from traces.io import conform_trace, read_trace_table
from traces.prompts.images import MAX_SIDE
from traces.validate import DEFAULT_BLOCK_SIZE, block_size_of, validate_trace
from traces.values import (
    MAX_ARRIVAL_S,
    MAX_ID_CHARS,
    MAX_IMAGE_PIXELS,
    MAX_IMAGES,
    MAX_TOKENS,
    MESSAGES_MAX_DEPTH,
    find_bad_value,
    messages_problem,
)

IMAGE_TYPE = pa.list_(pa.struct([("width", pa.int32()), ("height", pa.int32())]))
OK_MESSAGES = '[{"role": "user", "content": "hi"}]'


def table(**columns: pa.Array | list[object]) -> pa.Table:
    """Three good rows, with ``columns`` replacing or adding columns."""
    cols: dict[str, pa.Array | list[object]] = {
        s.REQUEST_ID: ["a", "b", "c"],
        s.ARRIVAL_S: [0.0, 0.5, 1.0],
        s.INPUT_TOKENS: [10, 20, 30],
        s.OUTPUT_TOKENS: [5, 5, 5],
    }
    cols.update(columns)
    return conform_trace(pa.table(cols), "t")


def refusal(t: pa.Table) -> ValidationError:
    with pytest.raises(ValidationError) as info:
        validate_trace(t, "t.parquet")
    message = str(info.value)
    assert "\n" not in message
    assert message.startswith(f"t.parquet: row {info.value.row}, column {info.value.column!r}: ")
    return info.value


@pytest.mark.parametrize(
    ("columns", "row", "column", "words"),
    [
        ({s.REQUEST_ID: ["a", "b\r\nX-Evil: injected", "c"]}, 1, s.REQUEST_ID, "CR at position 1"),
        ({s.REQUEST_ID: ["a", "b", "c\nX: y"]}, 2, s.REQUEST_ID, "LF at position 1"),
        ({s.REQUEST_ID: ["a\x00b", "b", "c"]}, 0, s.REQUEST_ID, "NUL at position 1"),
        ({s.REQUEST_ID: ["a", "b c", "c"]}, 1, s.REQUEST_ID, "a space"),
        ({s.REQUEST_ID: ["a", "b", "cé"]}, 2, s.REQUEST_ID, "U+00E9"),
        ({s.REQUEST_ID: ["a", "\x7f", "c"]}, 1, s.REQUEST_ID, "U+007F"),
        ({s.MESSAGES: [OK_MESSAGES, "{not json", None]}, 1, s.MESSAGES, "not valid JSON"),
        ({s.MESSAGES: [None, None, '{"role": "user"}']}, 2, s.MESSAGES, "JSON array"),
        ({s.MESSAGES: ["[]", None, None]}, 0, s.MESSAGES, "non-empty"),
        ({s.MESSAGES: [None, '["hi"]', None]}, 1, s.MESSAGES, "message 0 is a JSON string"),
        ({s.MESSAGES: [None, '[{"n": NaN}]', None]}, 1, s.MESSAGES, "NaN"),
        ({s.MESSAGES: [None, '[{"n": 1e999}]', None]}, 1, s.MESSAGES, "out of range"),
        ({s.MESSAGES: [None, '[{"n": 1' + "0" * 30 + "}]", None]}, 1, s.MESSAGES, "64 bits"),
        ({s.MESSAGES: ['[{"c": "\\ud800"}]', None, None]}, 0, s.MESSAGES, "surrogate"),
        (
            {s.MESSAGES: [None, "[{" + '"a": ' + "[" * 300 + "]" * 300 + "}]", None]},
            1,
            s.MESSAGES,
            f"deeper than {MESSAGES_MAX_DEPTH}",
        ),
        (
            {s.SLO_TTFT_MS: pa.array([100.0, math.nan, None], pa.float32())},
            1,
            s.SLO_TTFT_MS,
            "got nan",
        ),
        ({s.SLO_TPOT_MS: pa.array([None, None, -5.0], pa.float32())}, 2, s.SLO_TPOT_MS, "-5"),
        ({s.SLO_TPOT_MS: pa.array([0.0, None, None], pa.float32())}, 0, s.SLO_TPOT_MS, "got 0"),
        (
            {s.SLO_TTFT_MS: pa.array([None, math.inf, None], pa.float32())},
            1,
            s.SLO_TTFT_MS,
            "got inf",
        ),
        ({s.IMAGE_TOKENS: pa.array([0, -3, None], pa.int32())}, 1, s.IMAGE_TOKENS, "-3"),
        (
            {
                s.IMAGES: pa.array(
                    [None, [], [{"width": 8, "height": 8}, {"width": -4, "height": 10}]], IMAGE_TYPE
                )
            },
            2,
            s.IMAGES,
            "image 1 is -4x10 pixels",
        ),
        (
            {s.IMAGES: pa.array([[{"width": 8, "height": MAX_SIDE + 1}], None, None], IMAGE_TYPE)},
            0,
            s.IMAGES,
            f"1..{MAX_SIDE}",
        ),
        (
            {s.IMAGES: pa.array([None, [None], None], IMAGE_TYPE)},
            1,
            s.IMAGES,
            "image 0 is missing",
        ),
        (
            {s.IMAGES: pa.array([None, [{"width": 8, "height": None}], None], IMAGE_TYPE)},
            1,
            s.IMAGES,
            "8xNone",
        ),
        (
            {s.PREFIX_BLOCKS: pa.array([[1, 2], None, [3, None]], pa.list_(pa.int64()))},
            2,
            s.PREFIX_BLOCKS,
            "null",
        ),
        ({s.ARRIVAL_S: [0.0, 1.0, math.inf]}, 2, s.ARRIVAL_S, "infinite"),
        # Sizes that cannot be served (issue 19): refused with row and column.
        ({s.ARRIVAL_S: [0.0, 1.0, 1e300]}, 2, s.ARRIVAL_S, "later than 1e+09 s"),
        ({s.INPUT_TOKENS: [1, MAX_TOKENS + 1, 3]}, 1, s.INPUT_TOKENS, "more than 10,000,000"),
        ({s.OUTPUT_TOKENS: [1, 2, 2**31 - 1]}, 2, s.OUTPUT_TOKENS, "2,147,483,647 tokens"),
        (
            {s.IMAGE_TOKENS: pa.array([MAX_TOKENS + 1, 0, 0], pa.int32())},
            0,
            s.IMAGE_TOKENS,
            "0..10",
        ),
        ({s.REQUEST_ID: ["a", "b" * (MAX_ID_CHARS + 1), "c"]}, 1, s.REQUEST_ID, "longer than 1024"),
        (
            {
                s.IMAGES: pa.array(
                    [None, [{"width": 1, "height": 1}] * (MAX_IMAGES + 1), None], IMAGE_TYPE
                )
            },
            1,
            s.IMAGES,
            "1,001 images",
        ),
        (
            {
                s.IMAGES: pa.array(
                    [
                        [],
                        None,
                        [{"width": MAX_SIDE, "height": MAX_SIDE}, {"width": 1, "height": 1}],
                    ],
                    IMAGE_TYPE,
                )
            },
            2,
            s.IMAGES,
            f"at most {MAX_IMAGE_PIXELS:,}",
        ),
    ],
)
def test_each_rule_names_row_and_column(
    columns: dict[str, pa.Array | list[object]], row: int, column: str, words: str
) -> None:
    error = refusal(table(**columns))
    assert (error.row, error.column) == (row, column)
    assert words in str(error)


def test_good_values_pass() -> None:
    validate_trace(
        table(
            **{
                s.REQUEST_ID: ["a-1", "B_2.x:y/z~", "!#$%&'*+^`|"],
                s.MESSAGES: [
                    OK_MESSAGES,
                    None,
                    '[{"role": "user", "content": [{"type": "text", "text": "\\ud83d\\ude00 é"}]}]',
                ],
                s.SLO_TTFT_MS: pa.array([0.001, None, 5e4], pa.float32()),
                s.IMAGE_TOKENS: pa.array([0, None, 1222], pa.int32()),
                s.IMAGES: pa.array([None, [{"width": 1, "height": MAX_SIDE}], []], IMAGE_TYPE),
                s.PREFIX_BLOCKS: pa.array([[-1, 2**62], None, []], pa.list_(pa.int64())),
            }
        ),
        "t",
    )


def test_the_largest_servable_sizes_pass() -> None:
    validate_trace(
        table(
            **{
                s.REQUEST_ID: ["a", "b" * MAX_ID_CHARS, "c"],
                s.ARRIVAL_S: [0.0, 1.0, MAX_ARRIVAL_S],
                s.INPUT_TOKENS: [MAX_TOKENS, 1, 1],
                s.OUTPUT_TOKENS: [1, MAX_TOKENS, 1],
                s.IMAGE_TOKENS: pa.array([MAX_TOKENS, None, 0], pa.int32()),
                s.IMAGES: pa.array(
                    [
                        [{"width": 1, "height": 1}] * MAX_IMAGES,
                        None,
                        [{"width": MAX_SIDE, "height": MAX_SIDE}],
                    ],
                    IMAGE_TYPE,
                ),
            }
        ),
        "t",
    )


def test_a_count_beyond_its_column_names_the_row(tmp_path: Path) -> None:
    """A trace written with int64 counts beyond int32: the row, not only the column."""
    path = tmp_path / "wide.parquet"
    pq.write_table(
        pa.table(
            {
                s.REQUEST_ID: ["a", "b"],
                s.ARRIVAL_S: [0.0, 1.0],
                s.INPUT_TOKENS: pa.array([1, 2**40], pa.int64()),
                s.OUTPUT_TOKENS: [1, 1],
            }
        ),
        path,
    )
    with pytest.raises(ValidationError) as info:
        read_trace_table(path)
    assert (info.value.row, info.value.column) == (1, s.INPUT_TOKENS)
    assert "1099511627776 does not fit int32" in str(info.value)


@pytest.mark.parametrize("value", [0, -1, MAX_TOKENS + 1, 10**12, True, 2.5, "512", [512]])
def test_a_block_size_that_cannot_be_built_is_refused(value: object) -> None:
    with pytest.raises(ValidationError) as info:
        block_size_of({"block_size": value}, "t.parquet")
    assert str(info.value).startswith("t.parquet: metadata 'block_size' must be an integer")
    assert info.value.column == "block_size"


def test_a_block_size_absent_is_the_default_and_a_good_one_is_kept() -> None:
    assert block_size_of({}, "t") == DEFAULT_BLOCK_SIZE
    assert block_size_of({"block_size": None}, "t") == DEFAULT_BLOCK_SIZE
    assert block_size_of({"block_size": 16}, "t") == 16


def test_a_long_bad_value_is_shown_cut(tmp_path: Path) -> None:
    """A megabyte id is named, not printed: the message stays one short line."""
    path = tmp_path / "long.parquet"
    pq.write_table(pa.table({**_plain(), s.REQUEST_ID: ["a", "b", "x" * 1_000_000 + "\n"]}), path)
    with pytest.raises(ValidationError) as info:
        read_trace_table(path)
    assert len(str(info.value)) < 400
    assert "1000001 characters" in str(info.value)


def _plain() -> dict[str, list[object]]:
    return {
        s.REQUEST_ID: ["a", "b", "c"],
        s.ARRIVAL_S: [0.0, 0.5, 1.0],
        s.INPUT_TOKENS: [10, 20, 30],
        s.OUTPUT_TOKENS: [5, 5, 5],
    }


def test_the_cli_refuses_with_one_line_and_exit_2(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from loadgen.cli.root import cli

    path = tmp_path / "evil.parquet"
    pq.write_table(pa.table({**_plain(), s.REQUEST_ID: ["a", "b\r\nX-Evil: injected", "c"]}), path)
    result = CliRunner().invoke(cli, ["trace", "validate", str(path)])
    assert result.exit_code == 2
    assert result.output.count("\n") == 1
    assert "row 1, column 'request_id'" in result.output


# ---------------------------------------------------------------- importers
def test_the_import_sink_names_the_source_line(tmp_path: Path) -> None:
    src = tmp_path / "sw.csv"
    src.write_text(
        "request_id,request_type,application_id,arrival_timestamp,batch_size,prompt_size,token_size\n"
        "a,2,0,1,1,10,2\nb c,2,0,2,1,10,2\n"
    )
    with pytest.raises(
        SourceError, match=r"sw\.csv: line 3, column 'request_id': request id 'b c'"
    ):
        import_trace("splitwise", src, tmp_path / "o.parquet", ImportOptions())
    assert not (tmp_path / "o.parquet").exists()


# ---------------------------------------------------------------- properties
_ANY_TEXT = st.text(st.characters(codec="utf-8"), max_size=12)
_ASCII_TEXT = st.text(st.characters(min_codepoint=0, max_codepoint=0x7F), max_size=12)
_VISIBLE_TEXT = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=12)


@given(
    st.lists(st.one_of(_ANY_TEXT, _ASCII_TEXT, _VISIBLE_TEXT), min_size=1, max_size=6, unique=True)
)
def test_request_ids_are_refused_exactly_when_not_visible_ascii(ids: list[str]) -> None:
    n = len(ids)
    t = table(
        **{
            s.REQUEST_ID: ids,
            s.ARRIVAL_S: [float(i) for i in range(n)],
            s.INPUT_TOKENS: [1] * n,
            s.OUTPUT_TOKENS: [1] * n,
        }
    )
    bad = [i for i, rid in enumerate(ids) if not all("\x21" <= c <= "\x7e" for c in rid)]
    event("accepted" if not bad else "refused")
    if not bad:
        validate_trace(t, "t")
        for rid in ids:  # what goes on the wire: no byte that could end a header line
            assert not set(rid.encode("ascii")) & {0, 10, 13}
        return
    error = refusal(t)
    assert (error.row, error.column) == (bad[0], s.REQUEST_ID)


_JSON_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=8),
)
_JSON = st.recursive(
    _JSON_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=12,
)


def _as_text(doc: object) -> str:
    import json

    return json.dumps(doc)  # NaN and Infinity written as JSON never allows


@given(
    st.one_of(
        _JSON.map(_as_text),
        st.lists(_JSON, max_size=3).map(_as_text),
        st.lists(st.dictionaries(st.text(max_size=4), _JSON, max_size=3), max_size=3).map(_as_text),
        st.text(max_size=30),
        st.text(st.sampled_from('[]{}":,0123456789.eE-+ntrufalsNIfiy\\ud8'), max_size=40),
    )
)
def test_accepted_messages_are_what_the_body_encoder_takes(text: str) -> None:
    """Either refused with a reason, or an array of objects that orjson (the replay's JSON
    encoder) parses and writes back inside a request body without error."""
    problem = messages_problem(text)
    found = find_bad_value(table(**{s.MESSAGES: [None, text, None]}))
    assert (found is None) == (problem is None)
    event("accepted" if problem is None else "refused")
    if problem is not None:
        assert found is not None
        assert (found.row, found.column) == (1, s.MESSAGES)
        return
    doc = orjson.loads(text)
    assert isinstance(doc, list)
    assert doc
    assert all(isinstance(m, dict) for m in doc)
    orjson.dumps({"model": "m", "stream": True, "messages": doc})


@given(
    st.lists(
        st.one_of(st.none(), st.floats(width=32, allow_nan=True, allow_infinity=True)),
        min_size=3,
        max_size=3,
    ),
    st.sampled_from([s.SLO_TTFT_MS, s.SLO_TPOT_MS]),
)
def test_slo_values_are_positive_finite_or_refused(values: list[float | None], column: str) -> None:
    t = table(**{column: pa.array(values, pa.float32())})
    bad = [i for i, v in enumerate(values) if v is not None and not (v > 0 and math.isfinite(v))]
    event("accepted" if not bad else "refused")
    if not bad:
        validate_trace(t, "t")
        return
    error = refusal(t)
    assert (error.row, error.column) == (bad[0], column)
