"""``--no-stream`` end to end: non-streamed replies from the simulator on loopback, with
TGI's timing headers joined (``loadgen sim --tgi-headers``), and analyzers that leave TTFT
and TPOT null for such rows (never 0)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from analyzers.metrics import summarize
from loadgen.run.session import SessionOptions, run_session
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import read_run_info, write_trace

SimFactory = Callable[..., SimProcess]


def test_a_non_streamed_run_joins_tgi_headers_and_has_no_ttft(
    sim: SimFactory, tmp_path: Path
) -> None:
    server = sim("--tgi-headers", "--ttft-ms", "30", "--itl-ms", "2")
    n = 6
    trace = tmp_path / "t.parquet"
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i / 50 for i in range(n)],
                "input_tokens": [16] * n,
                "output_tokens": [5] * n,
                "api": ["chat", "completions"] * (n // 2),
                "temperature": [0.0] * n,
            }
        ),
        trace,
    )
    result = asyncio.run(
        run_session(
            SessionOptions(
                trace_path=trace,
                run_dir=tmp_path / "run",
                base_url=server.base_url,
                stream=False,
                extra_body={"seed": 3},
                scrape_metrics=False,
            ),
            install_signal_handlers=False,
        )
    )
    rows = pq.read_table(result.run_dir / s.REQUESTS_FILE).to_pylist()
    assert len(rows) == n
    for row in rows:
        assert row[s.OUTCOME] == s.OUTCOME_OK, row[s.ERROR]
        assert row[s.FIRST_TOKEN_NS] is None
        assert row[s.CHUNK_OFFSETS_US] == []
        assert row[s.COMPLETION_TOKENS] == 5
        assert row[s.PROMPT_TOKENS] is not None
        assert row[s.FINISH_REASON] is not None
        # TGI's headers, whole ms: the queue (none here) and prefill + decode together.
        e2e_ms = (row[s.END_NS] - row[s.SENT_NS]) / 1e6
        assert row[s.SERVER_QUEUE_MS] is not None
        assert row[s.SERVER_QUEUE_MS] <= 1.0
        inference = row[s.SERVER_INFERENCE_MS]
        assert inference is not None
        assert 30 <= inference <= e2e_ms
        assert row[s.SERVER_PREFILL_MS] is None  # no body metrics, as from TGI
    info = read_run_info(result.run_dir)
    assert info is not None
    assert info.config.stream is False
    assert info.config.extra_body == {"seed": 3}
    overall = summarize(result.run_dir).overall
    stats = {m.key: m for m in overall.metrics}
    for key in ("ttft_ms", "tpot_ms"):
        assert stats[key].count == 0, stats[key]
        assert stats[key].mean is None, stats[key]
    assert stats["e2e_ms"].count == n
    assert stats["e2e_ms"].mean is not None
    assert overall.output_tokens == 5 * n
