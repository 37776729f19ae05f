"""The million-token chapter of ``loadgen plan`` (issue 22, item 4)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from loadgen.cli.root import cli


def _plan(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(cli, ["plan", *args])
    return done.exit_code, done.output


def test_a_million_tokens_on_a_model_that_holds_them() -> None:
    code, out = _plan(
        "--model", "qwen2.5-7b-1m", "--gpu", "h200", "--prompt-tokens", "1000000", "--json"
    )
    assert code == 0, out
    values = {p["key"]: p for p in json.loads(out)["prediction"]}
    kv = values["long_kv_bytes_request"]["value"]
    # 2 x 28 layers x 4 kv heads x 128 dims x 2 B = 57,344 B/token, x (1,000,000 + 256).
    assert kv == 57_344 * 1_000_256
    assert values["long_requests_fit"]["value"] == 1
    one, chunked = values["long_prefill_one_pass_s"]["value"], values["long_prefill_chunked_s"]
    assert chunked["value"] >= one * 0.99  # chunking bounds the step, not the work
    assert values["long_prefill_prefix_reuse_s"]["value"] < 0.5 * chunked["value"]
    assert values["long_ttft_idle_s"]["value"] == chunked["value"]
    # GQA 7:1 against MHA; fp8 halves bf16; the 5:1 window keeps a sixth of the layers full.
    assert values["long_arch_mha"]["value"] == 7 * kv
    assert values["long_arch_fp8"]["value"] == kv / 2
    assert values["long_arch_sliding"]["value"] < kv / 5
    assert "fit in" in values["long_arch_mla"]["chain"]


def test_a_million_tokens_on_llama_3_1_8b_is_refused_with_both_numbers() -> None:
    code, out = _plan("--model", "llama-3.1-8b", "--gpu", "h200", "--prompt-tokens", "1000000")
    assert code == 2
    assert "1000000 tokens exceeds llama-3.1-8b's context of 131072 tokens" in out
    assert "qwen2.5-7b-1m" in out


def test_short_prompts_have_no_chapter() -> None:
    code, out = _plan("--model", "llama-3.1-8b", "--gpu", "h100", "--json")
    assert code == 0
    assert not [p for p in json.loads(out)["prediction"] if p["key"].startswith("long_")]
