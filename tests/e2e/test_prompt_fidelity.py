"""Prompt fidelity end to end: the simulator counts tokens with a tokenizer this test
builds, and the replay's prompt strategies must hit the trace's token counts."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pyarrow as pa
import pytest

from loadgen.run.session import SessionOptions, run_session
from loadgen.sim.launch import SimProcess
from traces import schema as s
from traces.io import read_run_info, read_run_table, write_trace

tokenizers = pytest.importorskip("tokenizers", reason="the tokenizer extra is not installed")

CORPUS = [
    "the quick brown fox jumps over the lazy dog",
    "a journey of a thousand miles begins with a single step",
    "prefill is compute bound and decode is bound by memory bandwidth",
    "alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima",
    "the early bird catches the worm; actions speak louder than words",
] * 50


def build_tokenizer(path: Path) -> Path:
    """A small byte-level BPE: words are often several tokens, as with real models."""
    models, pre, trainers, decoders = (
        tokenizers.models,
        tokenizers.pre_tokenizers,
        tokenizers.trainers,
        tokenizers.decoders,
    )
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        CORPUS, trainers.BpeTrainer(vocab_size=300, initial_alphabet=pre.ByteLevel.alphabet())
    )
    tok.save(str(path))
    return path


def make_trace(path: Path) -> Path:
    n = 24
    write_trace(
        pa.table(
            {
                "request_id": [f"q{i}" for i in range(n)],
                "arrival_s": [i * 0.05 for i in range(n)],
                "input_tokens": [40 + 37 * i for i in range(n)],
                "output_tokens": [2] * n,
                "api": ["chat" if i % 2 else "completions" for i in range(n)],
                "prefix_blocks": [[1, 2, 100 + i] if i % 3 == 0 else None for i in range(n)],
            }
        ),
        path,
        {"block_size": 64},
    )
    return path


def replay(opts: SessionOptions) -> Path:
    asyncio.run(run_session(opts, install_signal_handlers=False))
    return opts.run_dir


@pytest.mark.slow
def test_tokenizer_strategy_is_exact_and_calibrated_within_2_percent(
    tmp_path: Path, sim: Callable[..., SimProcess]
) -> None:
    tok = build_tokenizer(tmp_path / "tokenizer.json")
    server = sim("--model", "llama-3.1-8b", "--gpu", "h100", "--tokenizer", str(tok))
    trace = make_trace(tmp_path / "t.parquet")
    options = partial(
        SessionOptions, trace_path=trace, base_url=server.base_url, scrape_metrics=False
    )

    exact = replay(options(run_dir=tmp_path / "exact", tokenizer=tok))
    table = read_run_table(exact)
    assert set(table.column(s.OUTCOME).to_pylist()) == {s.OUTCOME_OK}
    requested = table.column(s.INPUT_TOKENS).to_pylist()
    assert table.column(s.PROMPT_TOKENS).to_pylist() == requested
    exact_info = read_run_info(exact)
    assert exact_info is not None
    assert exact_info.prompts.strategy.name == "tokenizer"

    words = replay(options(run_dir=tmp_path / "words"))
    word_counts = read_run_table(words).column(s.PROMPT_TOKENS).to_pylist()
    # Words are not tokens under this tokenizer: the default strategy is far off...
    assert sum(word_counts) > 1.2 * sum(requested)

    calibrated = replay(options(run_dir=tmp_path / "cal", calibrate_prompts=True))
    info = read_run_info(calibrated)
    assert info is not None
    assert info.prompts.strategy.name == "calibrated"
    assert info.prompts.strategy.tokens_per_word > 1.2
    assert info.prompts.calibration is not None
    assert info.prompts.calibration.samples
    got = read_run_table(calibrated).column(s.PROMPT_TOKENS).to_pylist()
    # ... and calibration brings the total within 2%.
    assert abs(sum(got) / sum(requested) - 1) < 0.02
