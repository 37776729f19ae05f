"""A run against hostile input: a trace or options that would inject headers or crash the
replay midway, and servers that echo credentials back.

* Hypothesis draws traces (request ids, ``messages``, SLOs) and options (``--header``
  value, ``--run-id``) of random strings: each draw is refused up front with one line
  naming where (row and column, or the option), or replays to the end against the
  simulator with one row per request. Nothing in between: no traceback midway.
* The real command, in its own process, against a loopback server that records the raw
  bytes it receives: an injecting request id never reaches it; a server echoing the API
  key in a 401 body and in an in-stream error leaves no trace of the key in
  requests.parquet, run.json or the command's output; user info in ``--base-url`` is in
  no file and no output.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st
from scripted import response, scripted_server

from loadgen.errors import ConfigError
from loadgen.run.session import SessionOptions, SessionResult, run_session
from loadgen.sim.launch import SimProcess, start_sim
from traces import schema as s
from traces.errors import ValidationError

ROWS = 3
KEY = "sk-live-Ech0ed-by-the-server-42"


@pytest.fixture(scope="module")
def simulator() -> Iterator[SimProcess]:
    """One simulator for every drawn trace (fast: 1 ms to the first token and per token)."""
    with start_sim(["--ttft-ms", "1", "--itl-ms", "1"]) as server:
        yield server


# ---------------------------------------------------------------- drawn traces
_VISIBLE = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), min_size=1, max_size=8)
_HOSTILE_CHARS = st.sampled_from(["\r", "\n", "\r\n", "\x00", " ", "\t", "é", "\x7f", "X-Evil: 1"])
_HOSTILE = st.one_of(
    st.tuples(_VISIBLE, _HOSTILE_CHARS, st.text(max_size=3)).map("".join),
    st.text(max_size=6),
)
"""Strings an id or header value should not be: a character that ends or bends a header
line somewhere among plain ones, or any text at all (which may happen to be fine)."""
_MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["user", "system", "assistant", "tool"]),
        "content": st.text(max_size=20),
    }
)
_GOOD_MESSAGES = st.one_of(st.none(), st.lists(_MESSAGE, min_size=1, max_size=3).map(json.dumps))
_ANY_MESSAGES = st.one_of(
    _GOOD_MESSAGES,
    st.lists(st.one_of(_MESSAGE, st.integers(), st.text(max_size=4)), max_size=2).map(json.dumps),
    st.text(max_size=20),
    st.sampled_from(
        ["{not json", "[NaN]", '[{"n": 1e999}]', '[{"c": "\\ud800"}]', "[]", "{}", "null"]
    ),
)
_GOOD_SLOS = st.one_of(st.none(), st.floats(min_value=0.5, max_value=1e6, width=32))
_ANY_SLOS = st.one_of(st.none(), st.floats(width=32, allow_nan=True, allow_infinity=True))
HOSTILE_IN = ("nothing", "request_id", "messages", "slo", "header", "run_id")


@st.composite
def cases(draw: st.DrawFn) -> tuple[str, pa.Table, str, str | None]:
    """One column or option drawn from anything, the others from good values: about a
    sixth of the cases are all good and many hostile draws happen to be fine, so both
    refusals and replays are exercised."""
    hostile = draw(st.sampled_from(HOSTILE_IN))
    ids = draw(
        st.lists(
            st.one_of(_VISIBLE, _HOSTILE) if hostile == "request_id" else _VISIBLE,
            min_size=ROWS,
            max_size=ROWS,
            unique=True,
        )
    )
    messages = _ANY_MESSAGES if hostile == "messages" else _GOOD_MESSAGES
    slos = _ANY_SLOS if hostile == "slo" else _GOOD_SLOS
    table = pa.table(
        {
            s.REQUEST_ID: ids,
            s.ARRIVAL_S: [0.0] * ROWS,
            s.INPUT_TOKENS: [4] * ROWS,
            s.OUTPUT_TOKENS: [2] * ROWS,
            s.API: [s.API_CHAT] * ROWS,
            s.MESSAGES: pa.array([draw(messages) for _ in range(ROWS)], pa.string()),
            s.SLO_TTFT_MS: pa.array([draw(slos) for _ in range(ROWS)], pa.float32()),
            s.SLO_TPOT_MS: pa.array([draw(slos) for _ in range(ROWS)], pa.float32()),
        }
    )
    header = draw(_HOSTILE if hostile == "header" else _VISIBLE)
    run_id = draw(_HOSTILE if hostile == "run_id" else st.one_of(st.none(), _VISIBLE))
    return hostile, table, header, run_id


def _case(
    hostile: str, *, ids: tuple[str, ...] = ("a", "b", "c"), header: str = "h", **columns: object
) -> tuple[str, pa.Table, str, str | None]:
    """A case written out: good rows with ``columns`` replacing some."""
    cols: dict[str, object] = {
        s.REQUEST_ID: list(ids),
        s.ARRIVAL_S: [0.0] * ROWS,
        s.INPUT_TOKENS: [4] * ROWS,
        s.OUTPUT_TOKENS: [2] * ROWS,
        s.MESSAGES: pa.array([None] * ROWS, pa.string()),
        **columns,
    }
    return hostile, pa.table(cols), header, None


def _replay(opts: SessionOptions) -> SessionResult | ValidationError | ConfigError:
    """The session's result, or the one-line refusal it raised before starting."""
    try:
        return asyncio.run(run_session(opts, install_signal_handlers=False))
    except (ValidationError, ConfigError) as exc:
        return exc


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=cases())
# The cases of the issue, each of which crashed the replay midway or injected a header.
@example(case=_case("request_id", ids=("a", "b\r\nX-Evil: injected", "c")))
@example(case=_case("request_id", ids=("a", "b\x00X-Evil: injected", "c")))
@example(case=_case("request_id", ids=("a", "bé", "c")))
@example(case=_case("messages", messages=pa.array([None, "{not json", None], pa.string())))
@example(case=_case("slo", slo_ttft_ms=pa.array([1.0, float("nan"), None], pa.float32())))
@example(case=_case("slo", slo_tpot_ms=pa.array([1.0, -5.0, None], pa.float32())))
@example(case=_case("header", header="v\r\nX-Evil: injected"))
@example(case=_case("nothing"))
def test_a_drawn_trace_is_refused_up_front_or_replayed_to_the_end(
    simulator: SimProcess, case: tuple[str, pa.Table, str, str | None]
) -> None:
    hostile, table, header, run_id = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "t.parquet"
        pq.write_table(table, path)  # as found on disk: no writer validated it
        opts = SessionOptions(
            trace_path=path,
            run_dir=Path(tmp) / "run",
            base_url=simulator.base_url,
            model="sim",
            preflight=False,
            scrape_metrics=False,
            request_timeout_s=10.0,
            headers={"x-test": header.strip()},
            run_id=run_id,
        )
        got = _replay(opts)
        ran = (Path(tmp) / "run").exists()
        rows = pq.read_table(opts.run_dir / s.REQUESTS_FILE).to_pylist() if ran else []
    if isinstance(got, ValidationError):
        event(f"refused: {got.column}")
        assert hostile in ("request_id", "messages", "slo")
        assert "\n" not in str(got)
        assert got.column in table.column_names
        assert got.row is not None
        assert 0 <= got.row < ROWS
        assert f"row {got.row}, column {got.column!r}" in str(got)
        assert not ran  # refused before the run began
        return
    if isinstance(got, ConfigError):
        event(f"refused: {hostile}")
        assert hostile in ("header", "run_id")
        assert "\n" not in str(got)
        assert str(got).startswith(("--header", "--run-id"))
        assert not ran
        return
    event("replayed")
    assert got.rows == ROWS
    assert sorted(r[s.REQUEST_ID] for r in rows) == sorted(table.column(s.REQUEST_ID).to_pylist())
    for row in rows:
        assert row[s.OUTCOME] in (s.OUTCOME_OK, s.OUTCOME_HTTP_ERROR), row[s.ERROR]
        assert row[s.X_REQUEST_ID] == f"{got.run_id}-{row[s.REQUEST_ID]}"


# ---------------------------------------------------------------- the real command
def _json_reply(status: bytes, doc: object) -> bytes:
    body = json.dumps(doc).encode()
    return (
        b"HTTP/1.1 " + status + b"\r\ncontent-type: application/json\r\n"
        b"content-length: %d\r\n\r\n" % len(body) + body
    )


ECHO_401 = _json_reply(
    b"401 Unauthorized", {"error": {"message": f"Incorrect API key provided: {KEY}"}}
)
ECHO_IN_STREAM = response(
    b'data: {"error": {"message": "key ' + KEY.encode() + b' is over quota"}}\n\n'
)
MODELS = _json_reply(b"200 OK", {"data": [{"id": "m"}]})


def _trace(path: Path, ids: list[str]) -> Path:
    n = len(ids)
    pq.write_table(
        pa.table(
            {
                s.REQUEST_ID: ids,
                s.ARRIVAL_S: [0.1 * i for i in range(n)],
                s.INPUT_TOKENS: [4] * n,
                s.OUTPUT_TOKENS: [2] * n,
            }
        ),
        path,
    )
    return path


async def _loadgen(*args: str, env: dict[str, str] | None = None) -> tuple[int, str]:
    """``loadgen ARGS`` in its own process; its exit code and stdout+stderr."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "loadgen.cli.root",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    out, _ = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


def test_an_injecting_request_id_never_reaches_the_server(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "evil.parquet", ["a", "b\r\nX-Evil: injected", "c"])

    async def main() -> tuple[int, str, list[bytes], int]:
        async with scripted_server([MODELS] * 4) as (url, log):
            code, out = await _loadgen(
                "replay", str(trace), "--base-url", url + "/v1", "--model", "m",
                "--no-preflight", "--no-scrape-metrics", "--no-progress",
                "-o", str(tmp_path / "run"),
            )  # fmt: skip
        return code, out, log.requests, log.connections

    code, out, wire, connections = asyncio.run(main())
    assert code == 2, out
    assert out.strip().count("\n") == 0
    assert "row 1, column 'request_id'" in out
    assert "CR at position 1" in out
    assert (wire, connections) == ([], 0)  # refused before the first request


def test_an_api_key_echoed_by_the_server_is_stored_nowhere(tmp_path: Path) -> None:
    """A 401 whose body quotes the key, and an in-stream error quoting it: both become
    rows, and neither the rows, run.json nor the output holds the key."""
    trace = _trace(tmp_path / "t.parquet", ["q0", "q1"])
    run_dir = tmp_path / "run"

    async def main() -> tuple[int, str]:
        async with scripted_server([ECHO_401, ECHO_IN_STREAM]) as (url, _):
            return await _loadgen(
                "replay", str(trace), "--base-url", url + "/v1", "--model", "m",
                "--no-preflight", "--no-scrape-metrics", "--no-progress", "-o", str(run_dir),
                "--api-key-env", "LOADGEN_TEST_KEY",
                env={"LOADGEN_TEST_KEY": KEY},
            )  # fmt: skip

    code, out = asyncio.run(main())
    assert code == 0, out
    rows = pq.read_table(run_dir / s.REQUESTS_FILE).to_pylist()
    assert sorted(r[s.OUTCOME] for r in rows) == [s.OUTCOME_HTTP_ERROR, s.OUTCOME_PROTOCOL_ERROR]
    errors = sorted(str(r[s.ERROR]) for r in rows)
    assert errors == [
        "HTTP 401: Incorrect API key provided: <redacted>",
        "server error in stream: key <redacted> is over quota",
    ]
    assert KEY not in out
    for path in [p for p in run_dir.rglob("*") if p.is_file()]:
        assert KEY.encode() not in path.read_bytes(), path


def test_an_api_key_echoed_to_the_preflight_is_not_printed(tmp_path: Path) -> None:
    trace = _trace(tmp_path / "t.parquet", ["q0"])

    async def main() -> tuple[int, str]:
        async with scripted_server([MODELS, ECHO_401]) as (url, _):
            return await _loadgen(
                "replay", str(trace), "--base-url", url + "/v1", "--no-scrape-metrics",
                "--no-progress", "-o", str(tmp_path / "run"),
                "--api-key-env", "LOADGEN_TEST_KEY",
                env={"LOADGEN_TEST_KEY": KEY},
            )  # fmt: skip

    code, out = asyncio.run(main())
    assert code == 4, out
    assert "rejects the API key" in out
    assert "<redacted>" in out
    assert KEY not in out


def test_user_info_in_the_base_url_is_in_no_file_and_no_output(
    tmp_path: Path, simulator: SimProcess
) -> None:
    """Against the simulator, with scraping on (its /metrics URL is recorded too), and
    once more against a port nothing listens on (the endpoint error names the URL)."""
    trace = _trace(tmp_path / "t.parquet", ["q0", "q1"])
    password = "hunter2-Pa55word"
    userinfo_url = simulator.base_url.replace("http://", f"http://alice:{password}@")
    run_dir = tmp_path / "run"

    async def main() -> tuple[tuple[int, str], tuple[int, str]]:
        ran = await _loadgen(
            "replay", str(trace), "--base-url", userinfo_url, "--no-progress", "-o", str(run_dir),
        )  # fmt: skip
        refused = await _loadgen(
            "replay", str(trace), "--base-url", f"http://alice:{password}@127.0.0.1:1/v1",
            "--no-progress", "-o", str(tmp_path / "unreachable"),
        )  # fmt: skip
        return ran, refused

    (code, out), (refused_code, refused_out) = asyncio.run(main())
    assert code == 0, out
    assert refused_code == 4, refused_out
    assert "http://<redacted>@127.0.0.1:1/v1" in refused_out
    for text in (out, refused_out):
        assert password not in text
        assert "alice" not in text
    info = json.loads((run_dir / s.RUN_JSON).read_text())
    assert info["config"]["base_url"] == info["endpoint"]["base_url"]
    assert info["endpoint"]["base_url"].startswith("http://<redacted>@127.0.0.1:")
    assert info["server_metrics"]["url"].startswith("http://<redacted>@127.0.0.1:")
    for path in [p for p in run_dir.rglob("*") if p.is_file()]:
        assert password.encode() not in path.read_bytes(), path


# ---------------------------------------------------------------- credentials in the URL
STREAM_OK = response(
    b'data: {"choices": [{"delta": {"content": "hi"}, "finish_reason": "stop"}]}\n\n'
    b"data: [DONE]\n\n"
)


def _authorization(request: bytes) -> str | None:
    for line in request.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"authorization":
            return value.strip().decode()
    return None


@pytest.mark.parametrize("transport", ["fast", "httpx"])
def test_user_info_in_the_base_url_is_sent_as_basic_auth_and_stored_nowhere(
    tmp_path: Path, transport: str
) -> None:
    """``http://user:pass@host/v1``: every request (the preflight's and the run's) carries
    ``Authorization: Basic base64(user:pass)``; neither the password nor that base64 is in
    any file of the run or in the output, even when the server echoes them."""
    password = "s3cret-Pa55:word"  # a colon in the password, percent-encoded in the URL
    expected = "Basic " + base64.b64encode(f"alice:{password}".encode()).decode()
    credential = expected.removeprefix("Basic ")
    echo = response(
        b'data: {"error": {"message": "bad creds ' + credential.encode() + b" "
        + password.encode() + b'"}}\n\n'
    )  # fmt: skip
    trace = _trace(tmp_path / "t.parquet", ["q0", "q1"])
    run_dir = tmp_path / "run"

    async def main() -> tuple[tuple[int, str], list[bytes]]:
        absent = response(b"", status=b"404 Not Found", content_type=b"text/plain")
        # GET /models, the probe, the deployment's /metrics and /props, two requests
        script = [MODELS, STREAM_OK, absent, absent, STREAM_OK, echo]
        async with scripted_server(script) as (url, log):
            userinfo_url = url.replace("http://", "http://alice:s3cret-Pa55%3Aword@") + "/v1"
            ran = await _loadgen(
                "replay", str(trace), "--base-url", userinfo_url, "--model", "m",
                "--no-scrape-metrics", "--no-progress", "--transport", transport,
                "-o", str(run_dir),
            )  # fmt: skip
            return ran, log.requests

    (code, out), wire = asyncio.run(main())
    assert code == 0, out
    assert len(wire) == 6  # GET /models, the probe, /metrics, /props, two requests
    assert [_authorization(r) for r in wire] == [expected] * 6
    for text in (out, *(str(v) for v in json.loads((run_dir / s.RUN_JSON).read_text()).values())):
        assert password not in text
        assert credential not in text
    for path in [p for p in run_dir.rglob("*") if p.is_file()]:
        data = path.read_bytes()
        assert password.encode() not in data, path
        assert credential.encode() not in data, path
    errors = [r[s.ERROR] for r in pq.read_table(run_dir / s.REQUESTS_FILE).to_pylist()]
    assert "server error in stream: bad creds <redacted> <redacted>" in errors


@pytest.mark.parametrize(
    ("extra", "expected"),
    [
        (["--api-key-env", "LOADGEN_TEST_KEY"], f"Bearer {KEY}"),
        (["--header", "Authorization: Token t0ken"], "Token t0ken"),
    ],
)
def test_an_explicit_credential_wins_over_the_user_info(
    tmp_path: Path, extra: list[str], expected: str
) -> None:
    trace = _trace(tmp_path / "t.parquet", ["q0"])

    async def main() -> tuple[tuple[int, str], list[bytes]]:
        async with scripted_server([STREAM_OK]) as (url, log):
            ran = await _loadgen(
                "replay", str(trace), "--base-url", url.replace("http://", "http://a:b@") + "/v1",
                "--model", "m", "--no-preflight", "--no-scrape-metrics", "--no-progress",
                "-o", str(tmp_path / "run"), *extra,
                env={"LOADGEN_TEST_KEY": KEY},
            )  # fmt: skip
            return ran, log.requests

    (code, out), wire = asyncio.run(main())
    assert code == 0, out
    assert [_authorization(r) for r in wire] == [expected]


# ---------------------------------------------------------------- what run.json copies
def test_a_key_in_model_ids_or_trace_metadata_is_not_stored(tmp_path: Path) -> None:
    """The server lists models whose ids hold the API key, and the trace's metadata holds
    it too: run.json keeps the served models and the metadata, scrubbed."""
    models = _json_reply(b"200 OK", {"data": [{"id": f"tenant-{KEY}"}, {"id": "m"}]})
    trace = _trace(tmp_path / "t.parquet", ["q0"])
    table = pq.read_table(trace)
    meta = {"schema_version": s.SCHEMA_VERSION, "kind": "trace", "note": f"made with {KEY}",
            "nested": {KEY: [f"x{KEY}y"]}}  # fmt: skip
    pq.write_table(
        table.replace_schema_metadata({s.METADATA_KEY: json.dumps(meta).encode()}), trace
    )
    run_dir = tmp_path / "run"

    async def main() -> tuple[int, str]:
        async with scripted_server([models, STREAM_OK, STREAM_OK]) as (url, _):
            return await _loadgen(
                "replay", str(trace), "--base-url", url + "/v1", "--model", "m",
                "--no-scrape-metrics", "--no-progress", "-o", str(run_dir),
                "--api-key-env", "LOADGEN_TEST_KEY",
                env={"LOADGEN_TEST_KEY": KEY},
            )  # fmt: skip

    code, out = asyncio.run(main())
    assert code == 0, out
    info = json.loads((run_dir / s.RUN_JSON).read_text())
    assert info["endpoint"]["served_models"] == ["tenant-<redacted>", "m"]
    assert info["trace"]["metadata"]["note"] == "made with <redacted>"
    assert info["trace"]["metadata"]["nested"] == {"<redacted>": ["x<redacted>y"]}
    assert KEY not in out
    for path in [p for p in run_dir.rglob("*") if p.is_file()]:
        assert KEY.encode() not in path.read_bytes(), path
