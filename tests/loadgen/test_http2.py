"""``--transport httpx --http2`` against a loopback server that speaks HTTP/2 only
(``tests/support/h2server.py``): the preflight and every request reach it, stamped as over
HTTP/1.1. Skipped where the ``h2`` extra is not installed."""

from __future__ import annotations

import asyncio
import importlib.util
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from loadgen.errors import ConfigError
from loadgen.run.options import check_options
from loadgen.run.session import SessionOptions, SessionResult, run_session
from traces import schema as s
from traces.io import write_trace

pytestmark = pytest.mark.serial

needs_h2 = pytest.mark.skipif(
    importlib.util.find_spec("h2") is None,
    reason="the h2 package is not installed (pip install 'llm-loadgen[http2]')",
)


def _trace(path: Path, n: int) -> Path:
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i / 100 for i in range(n)],
                "input_tokens": [8] * n,
                "output_tokens": [3] * n,
            }
        ),
        path,
    )
    return path


@needs_h2
@pytest.mark.parametrize("stream", [True, False])
def test_http2_replay_against_an_http2_only_server(tmp_path: Path, stream: bool) -> None:
    from h2server import TOKENS, h2_server

    n = 4

    async def main() -> tuple[SessionResult, list[str]]:
        async with h2_server() as server:
            result = await run_session(
                SessionOptions(
                    trace_path=_trace(tmp_path / "t.parquet", n),
                    run_dir=tmp_path / "run",
                    base_url=server.base_url,
                    transport="httpx",
                    http2=True,
                    stream=stream,
                    scrape_metrics=False,
                ),
                install_signal_handlers=False,
            )
            return result, server.paths

    result, paths = asyncio.run(main())
    assert paths.count("/v1/chat/completions") == n + 1  # the probe, then the trace
    rows = pq.read_table(result.run_dir / s.REQUESTS_FILE).to_pylist()
    assert [r[s.OUTCOME] for r in rows] == [s.OUTCOME_OK] * n, [r[s.ERROR] for r in rows]
    for row in rows:
        assert row[s.COMPLETION_TOKENS] == TOKENS
        # The HTTP/2 trace events stamp the same steps as HTTP/1.1's.
        assert row[s.SENT_NS] <= row[s.REQUEST_WRITTEN_NS] <= row[s.HEADERS_NS] <= row[s.END_NS]
        if stream:
            assert len(row[s.CHUNK_OFFSETS_US]) == TOKENS
            assert row[s.HEADERS_NS] <= row[s.FIRST_TOKEN_NS]
        else:
            assert row[s.FIRST_TOKEN_NS] is None


def test_http2_needs_the_httpx_transport(tmp_path: Path) -> None:
    opts = SessionOptions(
        trace_path=tmp_path / "t.parquet",
        run_dir=tmp_path / "r",
        base_url="http://h/v1",
        http2=True,
    )
    with pytest.raises(ConfigError, match="--http2 needs --transport httpx"):
        check_options(opts)
