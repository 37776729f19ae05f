"""Fuzzed traces: a trace is refused up front with one line naming its row and column, or
every row of it can be sent. No row stops a run midway.

Hypothesis draws schema-shaped trace files: every column of the workload table, each
present or not, with values of its type drawn from anywhere (strings with CR, LF, NUL and
non-ASCII, ids of thousands of characters, NaN, infinities, negative and huge numbers in
every numeric column, integers beyond the column's type, invalid ``messages`` JSON, image
lists with bad, missing, too many or too large images, null list items) and the file's
``block_size`` metadata of any JSON type. Each file is read as ``loadgen replay`` reads it
(``read_trace`` and the metadata's ``block_size``); then either

- a ``UserError`` refused it: one line, and a ``ValidationError`` names the row and column
  it gives (``FILE: row R, column 'C': ...``), or the metadata key; or
- every row prepares as the replay prepares it, without the network: its due time on the
  run's clock, its prompt and JSON body (``Preparer``), its request head on both
  transports (``StreamingClient.ready``), and the run row it would be recorded as fits
  the run table (``record_problem``).

The run's options that reach every request are drawn too (a ``--header`` and a
``--run-id`` of any text, the URL's user info and an API key for the credential): refused
with one line naming the option, or sent with every row.

The default runs a few hundred examples in seconds; ``LOADGEN_LONG_FUZZ=1`` runs 10,000.
A handful more go through the real ``loadgen replay`` command against the simulator:
no traceback, exit 0 with one row per request or exit 2 (bad input) before the run.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from loadgen.client import StreamingClient
from loadgen.clock import Clock
from loadgen.errors import ConfigError
from loadgen.http.stamping import Progress
from loadgen.prepare.preparer import Preparer
from loadgen.run.options import SessionOptions, check_wire_values
from loadgen.run.shard import make_transport
from loadgen.schedule import due_offsets_ns
from loadgen.sim.launch import SimProcess, start_sim
from loadgen.stream.state import StreamState
from traces import schema as s
from traces.errors import UserError, ValidationError
from traces.io import read_metadata, read_trace
from traces.prompts.images import MAX_SIDE
from traces.prompts.maker import PromptMaker
from traces.records import TraceRequest, record_problem
from traces.runinfo import Capabilities
from traces.validate import block_size_of
from traces.values import MAX_TOKENS

INT32 = (-(2**31), 2**31 - 1)
_ODD_TEXT = st.one_of(
    st.text(max_size=12),
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=12),
    st.sampled_from(["a\r\nX-Evil: 1", "b\x00c", "é", " ", "", "\x7f", "x" * 1025, "y" * 1024]),
)
_ID = st.one_of(
    st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=10),
    _ODD_TEXT,
)


def _int32(small: st.SearchStrategy[int]) -> st.SearchStrategy[int | None]:
    """Mostly ``small``, else any int32, a bound's neighbours, or null."""
    return st.one_of(
        small,
        small,
        st.integers(*INT32),
        st.sampled_from([0, -1, MAX_TOKENS, MAX_TOKENS + 1, INT32[0], INT32[1]]),
        st.none(),
    )


_TOKENS = _int32(st.integers(1, 64))
_FLOATS = st.one_of(st.none(), st.floats(allow_nan=True, allow_infinity=True))
_FLOATS32 = st.one_of(st.none(), st.floats(width=32, allow_nan=True, allow_infinity=True))
_SIDE = st.one_of(
    st.integers(1, 24), st.integers(1, 24), st.sampled_from([0, -1, MAX_SIDE + 1, INT32[1]])
)
_IMAGE = st.one_of(
    st.none(),
    st.fixed_dictionaries({"width": _SIDE, "height": _SIDE}),
    st.fixed_dictionaries({"width": st.none(), "height": _SIDE}),
)
_IMAGES = st.one_of(
    st.none(),
    st.lists(_IMAGE, max_size=3),
    # Beyond the per-request bounds (refused before anything is drawn).
    st.just([{"width": MAX_SIDE, "height": MAX_SIDE}, {"width": 1, "height": 1}]),
    st.just([{"width": 1, "height": 1}] * 1001),
)
_MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["user", "system", "assistant"]), "content": st.text(max_size=12)}
)
_MESSAGES = st.one_of(
    st.none(),
    st.lists(_MESSAGE, min_size=1, max_size=3).map(json.dumps),
    st.lists(st.one_of(_MESSAGE, st.integers(), st.text(max_size=3)), max_size=2).map(json.dumps),
    st.text(max_size=16),
    st.sampled_from(["{x", "[NaN]", '[{"n": 1e999}]', '[{"c": "\\ud800"}]', "[]", "{}", "[" * 80]),
)
_BLOCK_SIZE = st.one_of(
    st.none(),
    st.integers(1, 600),
    st.sampled_from([0, -3, MAX_TOKENS + 1, 10**12, True, 2.5, "512", [512]]),
)
_TYPES = {field.name: field.type for field in s.TRACE_SCHEMA}
_ONE_IN_SIX = st.sampled_from([False, False, False, False, False, True])
"""True about once in six draws (``integers(0, 5) == 0`` would be far more often: hypothesis
favours 0)."""
_TOKEN = st.from_regex(r"x-[a-z0-9-]{1,8}", fullmatch=True)
"""A header name HTTP takes (a token)."""
_HEADER_NAME = st.one_of(
    st.sampled_from(["x-a b", "x-évil", "x:y", "x-evil\r\nInjected", "", "Authorization"]),
    st.text(max_size=6),
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Drawn:
    """A trace file's columns (those present) and its ``block_size`` metadata."""

    columns: dict[str, pa.Array]
    block_size: object
    header: tuple[str, str] = ("x-test", "1")
    """A ``--header`` NAME: VALUE the run sends with every request."""
    run_id: str | None = None
    """``--run-id``: the prefix of every ``X-Request-Id``."""


_VISIBLE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=8)
_GOOD: dict[str, st.SearchStrategy[object]] = {
    s.REQUEST_ID: _VISIBLE,
    s.ARRIVAL_S: st.floats(0, 1e3),
    s.INPUT_TOKENS: st.integers(1, 64),
    s.OUTPUT_TOKENS: st.integers(1, 64),
    s.WORKLOAD: st.sampled_from(["text", "image"]),
    s.API: st.sampled_from([s.API_CHAT, s.API_COMPLETIONS]),
    s.PREFIX_BLOCKS: st.one_of(st.none(), st.lists(st.integers(-(2**63), 2**63 - 1), max_size=4)),
    s.IMAGES: st.one_of(
        st.none(),
        st.lists(
            st.fixed_dictionaries({"width": st.integers(1, 24), "height": st.integers(1, 24)}),
            max_size=2,
        ),
    ),
    s.IMAGE_TOKENS: st.one_of(st.none(), st.integers(0, 64)),
    s.PROMPT: st.one_of(st.none(), st.text(max_size=12)),
    s.MESSAGES: st.one_of(st.none(), st.lists(_MESSAGE, min_size=1, max_size=3).map(json.dumps)),
    s.SESSION_ID: st.one_of(st.none(), st.text(max_size=8)),
    s.TURN: st.one_of(st.none(), st.integers(0, 5)),
    s.SLO_TTFT_MS: st.one_of(st.none(), st.floats(0.5, 1e6, width=32)),
    s.SLO_TPOT_MS: st.one_of(st.none(), st.floats(0.5, 1e6, width=32)),
}
"""Values each column takes when it is not the drawn-hostile one."""
_ANY: dict[str, st.SearchStrategy[object]] = {
    s.REQUEST_ID: st.one_of(_ID, st.none()),
    s.ARRIVAL_S: _FLOATS,
    s.INPUT_TOKENS: _TOKENS,
    s.OUTPUT_TOKENS: _TOKENS,
    s.WORKLOAD: st.one_of(st.none(), _ODD_TEXT),
    s.API: st.one_of(_ODD_TEXT, st.none(), _GOOD[s.API]),
    s.PREFIX_BLOCKS: st.one_of(
        st.none(), st.lists(st.one_of(st.integers(-(2**63), 2**63 - 1), st.none()), max_size=4)
    ),
    s.IMAGES: _IMAGES,
    s.IMAGE_TOKENS: _int32(st.integers(0, 64)),
    s.PROMPT: st.one_of(st.none(), _ODD_TEXT, st.just("p" * 5000)),
    s.MESSAGES: _MESSAGES,
    s.SESSION_ID: st.one_of(st.none(), _ODD_TEXT),
    s.TURN: _int32(st.integers(0, 5)),
    s.SLO_TTFT_MS: _FLOATS32,
    s.SLO_TPOT_MS: _FLOATS32,
}
"""Values from anywhere of the column's type."""
_REQUIRED = (s.REQUEST_ID, s.ARRIVAL_S, s.INPUT_TOKENS, s.OUTPUT_TOKENS)


@st.composite
def traces(draw: st.DrawFn, max_rows: int = 4) -> Drawn:
    """A trace of 1..``max_rows`` rows: a few columns (often none, sometimes all) drawn
    from anywhere, the others from good values, so that every rule is reached and many
    traces pass them all; optional columns present or not."""
    n = draw(st.integers(1, max_rows))
    hostile = draw(
        st.one_of(
            st.just(set()),
            st.sets(st.sampled_from(list(_ANY)), min_size=1, max_size=2),
            st.just(set(_ANY)),
        )
    )
    columns: dict[str, list[object]] = {}
    for name in _ANY:
        if name not in _REQUIRED and not draw(st.booleans()):
            continue
        values = _ANY[name] if name in hostile else _GOOD[name]
        columns[name] = [draw(values) for _ in range(n)]
        if name == s.ARRIVAL_S and (name not in hostile or draw(st.booleans())):
            columns[name].sort(key=lambda a: (a is None, a != a, a or 0.0))
    if s.REQUEST_ID not in hostile:
        columns[s.REQUEST_ID] = [f"{v}-{i}" for i, v in enumerate(columns[s.REQUEST_ID])]
    arrays: dict[str, pa.Array] = {}
    for name, values_ in columns.items():
        type_ = _TYPES[name]
        if pa.types.is_dictionary(type_):
            arrays[name] = pa.array(values_, pa.string())
        elif pa.types.is_integer(type_) and name in hostile and draw(st.integers(0, 3)) == 0:
            # As some writers store counts: int64, maybe beyond what the trace column holds.
            scale = draw(st.sampled_from([1, 2**20, 2**31]))
            arrays[name] = pa.array([v if v is None else v * scale for v in values_], pa.int64())  # type: ignore[operator]
        else:
            arrays[name] = pa.array(values_, type_)
    odd = draw(_ONE_IN_SIX)
    header = (draw(_HEADER_NAME if odd else _TOKEN), draw(_ODD_TEXT if odd else _VISIBLE))
    run_id = draw(st.one_of(st.none(), _ODD_TEXT if draw(_ONE_IN_SIX) else _VISIBLE))
    return Drawn(columns=arrays, block_size=draw(_BLOCK_SIZE), header=header, run_id=run_id)


def _write(drawn: Drawn, path: Path) -> None:
    meta = {"schema_version": s.SCHEMA_VERSION, "kind": "trace"}
    if drawn.block_size is not None:
        meta["block_size"] = drawn.block_size
    table = pa.table(drawn.columns).replace_schema_metadata(
        {s.METADATA_KEY: json.dumps(meta).encode()}
    )
    pq.write_table(table, path)  # as found on disk: no writer of ours validated it


Transports = tuple[tuple[httpx.AsyncClient, httpx.AsyncBaseTransport], ...]


@pytest.fixture(scope="module")
def transports() -> Iterator[Transports]:
    """An httpx client on each transport, as a replay builds them (nothing is sent)."""
    clock = Clock()
    made: list[tuple[httpx.AsyncClient, httpx.AsyncBaseTransport]] = []
    for kind in ("fast", "httpx"):
        transport = make_transport(kind, clock.now_ns, max_connections=4)
        made.append((httpx.AsyncClient(transport=transport, auth=httpx.Auth()), transport))
    yield tuple(made)

    async def close() -> None:
        for http, _ in made:
            await http.aclose()

    asyncio.run(close())


def _options(drawn: Drawn, path: Path) -> SessionOptions:
    return SessionOptions(
        trace_path=path,
        run_dir=path.parent / "run",
        base_url="http://u:p@127.0.0.1:9/v1",
        headers=dict([drawn.header]),
        run_id=drawn.run_id,
        api_key="sk-k",
    )


def _option_refusal(opts: SessionOptions) -> str | None:
    try:
        check_wire_values(opts)
    except ConfigError as exc:
        return str(exc)
    return None


def _read(path: Path) -> tuple[list[TraceRequest], int] | UserError:
    """What ``loadgen replay`` reads before its first request, or its one-line refusal."""
    try:
        requests = read_trace(path)
        return requests, block_size_of(read_metadata(path), str(path))
    except UserError as exc:
        return exc


def _check_refusal(exc: UserError, path: Path, drawn: Drawn) -> None:
    message = str(exc)
    assert "\n" not in message, message
    assert "\r" not in message, message
    assert message.startswith(str(path)), message
    if isinstance(exc, ValidationError):
        assert exc.column is not None, message
        if exc.column == "block_size":
            assert exc.row is None
            assert "metadata 'block_size'" in message
            return
        assert exc.column in drawn.columns, message
        assert exc.row is not None, message
        assert 0 <= exc.row < len(drawn.columns[s.REQUEST_ID]), message
        assert f"row {exc.row}, column {exc.column!r}: " in message


def _prepare_all(
    requests: list[TraceRequest], block_size: int, opts: SessionOptions, transports: Transports
) -> None:
    """Everything the replay does with each row before and after sending it."""
    clock = Clock()
    run_id = opts.run_id or "20261202T000000-abcdef"
    clients = [
        StreamingClient(
            http,
            base_url=opts.base_url,
            now_ns=clock.now_ns,
            run_id=run_id,
            headers=opts.request_headers(),
            transport=transport,
        )
        for http, transport in transports
    ]
    start_ns = clock.now_ns()
    for offset in due_offsets_ns([r.arrival_s for r in requests], 1.0):
        assert 0 <= start_ns + offset < 2**63
    preparer = Preparer(
        prompts=PromptMaker(block_size=block_size),
        model="m",
        run_id=run_id,
        capabilities=Capabilities(),
        warmup_requests=1,
    )
    for ordinal, req in enumerate(requests):
        job = preparer.prepare(req, ordinal)
        json.loads(bytes(job.body))
        for client in clients:
            ready = client.ready(job)
            progress = Progress(client._now_ns)
            record = client._rows.build(
                job, start_ns, start_ns, start_ns + 1, progress, StreamState(start_ns), "ok", None
            )
            assert record_problem(record) is None, (record_problem(record), ready)


def _check(drawn: Drawn, transports: Transports) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.parquet"
        _write(drawn, path)
        opts = _options(drawn, path)
        refused = _option_refusal(opts)  # the options' part of what reaches every request
        if refused is not None:
            event("refused: option")
            assert "\n" not in refused
            assert refused.startswith(("--header", "--run-id")), refused
            return
        got = _read(path)
        if isinstance(got, UserError):
            event(f"refused: {getattr(got, 'column', None) or type(got).__name__}")
            _check_refusal(got, path, drawn)
            return
        requests, block_size = got
        event("prepared")
        _prepare_all(requests, block_size, opts, transports)


def _one(**columns: list[object]) -> Drawn:
    """A written-out case: one good row, ``columns`` replacing or adding some."""
    base: dict[str, list[object]] = {
        s.REQUEST_ID: ["a"],
        s.ARRIVAL_S: [0.0],
        s.INPUT_TOKENS: [4],
        s.OUTPUT_TOKENS: [2],
        **columns,
    }
    return Drawn(
        columns={name: pa.array(v, _TYPES[name]) for name, v in base.items()}, block_size=None
    )


_SETTINGS = {"suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow]}


@settings(max_examples=200, **_SETTINGS)  # type: ignore[arg-type]
@given(drawn=traces())
# The rows of issue 19 that crashed a replay midway, or could not have been served.
@example(drawn=_one(messages=["{not json"]))
@example(drawn=_one(request_id=["b\u00e9"]))
@example(drawn=_one(input_tokens=[2**31 - 1]))
@example(drawn=_one(arrival_s=[1e300]))
@example(drawn=_one(images=[[{"width": MAX_SIDE, "height": MAX_SIDE}] * 2]))
@example(drawn=Drawn(columns=_one().columns, block_size=10**12))
@example(drawn=Drawn(columns=_one().columns, block_size=None, header=("x-a", "v\r\nX-Evil: 1")))
def test_a_fuzzed_trace_is_refused_with_its_row_or_every_row_prepares(
    transports: Transports, drawn: Drawn
) -> None:
    _check(drawn, transports)


@pytest.mark.slow
@pytest.mark.skipif(
    os.environ.get("LOADGEN_LONG_FUZZ") != "1",
    reason="10,000 examples take minutes: set LOADGEN_LONG_FUZZ=1 to run them",
)
@pytest.mark.timeout(3600)
@settings(max_examples=10_000, **_SETTINGS)  # type: ignore[arg-type]
@given(drawn=traces())
def test_a_fuzzed_trace_is_refused_with_its_row_or_every_row_prepares_10k(
    transports: Transports, drawn: Drawn
) -> None:
    _check(drawn, transports)


# ---------------------------------------------------------------- the real command
@pytest.fixture(scope="module")
def simulator() -> Iterator[SimProcess]:
    with start_sim(["--ttft-ms", "1", "--itl-ms", "0.1"]) as server:
        yield server


def _replay(trace: Path, run_dir: Path, base_url: str) -> tuple[int, str]:
    async def main() -> tuple[int, str]:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "loadgen.cli.root", "replay", str(trace),
            "--base-url", base_url, "--model", "sim", "--no-preflight",
            "--no-scrape-metrics", "--no-progress", "--request-timeout", "20",
            "--time-scale", "0.01", "-o", str(run_dir),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )  # fmt: skip
        try:
            out, _ = await asyncio.wait_for(proc.communicate(), timeout=60)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        assert proc.returncode is not None
        return proc.returncode, out.decode(errors="replace")

    return asyncio.run(main())


@settings(max_examples=2, **_SETTINGS)  # type: ignore[arg-type]
@given(drawn=traces(max_rows=3))
@example(drawn=_one(input_tokens=[MAX_TOKENS + 1]))
@example(drawn=_one(messages=['[{"role": "user", "content": "hi"}]'], image_tokens=[3]))
def test_a_fuzzed_trace_through_the_real_replay(simulator: SimProcess, drawn: Drawn) -> None:
    """The command in its own process: exit 0 with one row per request, or exit 2 with one
    line before the run. Only traces quick to serve run (tokens up to 64, arrivals within
    100 s, replayed 100 times faster); the unit property covers the others."""
    for name in (s.INPUT_TOKENS, s.OUTPUT_TOKENS):
        values = drawn.columns[name].to_pylist()
        if any(v is not None and 64 < v <= MAX_TOKENS for v in values):
            return
    if any(a is not None and 100 < a <= 1e9 for a in drawn.columns[s.ARRIVAL_S].to_pylist()):
        return
    with tempfile.TemporaryDirectory() as tmp:
        trace, run_dir = Path(tmp) / "t.parquet", Path(tmp) / "run"
        _write(drawn, trace)
        code, out = _replay(trace, run_dir, simulator.base_url)
        event(f"exit {code}")
        assert "Traceback" not in out, out
        assert code in (0, 2), out
        if code == 2:
            assert out.strip().count("\n") == 0, out
            assert not (run_dir / s.RUN_JSON).exists()
            return
        rows = pq.read_table(run_dir / s.REQUESTS_FILE).num_rows
        assert rows == len(drawn.columns[s.REQUEST_ID]), out
        info = json.loads((run_dir / s.RUN_JSON).read_text())
        assert info["status"] == "completed", info["status"]
