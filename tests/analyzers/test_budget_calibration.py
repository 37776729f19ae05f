"""The step-time terms, calibration profiles, ``loadgen plan calibrate`` and the acceptance
of the fitted model against the held-out half of the Splitwise measurements."""

from __future__ import annotations

import json
import statistics
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import pytest
from click.testing import CliRunner

from analyzers.budget import catalog
from analyzers.budget.calibrate import (
    ProfileFit,
    Residual,
    fit_profile,
    fit_profiles,
    observation_terms,
    prompt_split,
)
from analyzers.budget.engine.step import SequenceWork, step_cost
from analyzers.budget.engine.terms import (
    allreduce_payload_bytes,
    allreduces_per_step,
    collective_hops,
    link_bandwidth_bytes_per_s,
    pipeline_bubble_fraction,
    pipeline_handoff_bytes,
)
from analyzers.budget.measurements import Observation, load_measurements, measurements_from_csv
from analyzers.budget.profile import (
    PhaseProfile,
    StepProfile,
    load_profiles,
    profiles_from_toml,
    profiles_to_toml,
)
from analyzers.budget.specs import Deployment, HardwareSpec
from analyzers.errors import BudgetError
from loadgen.cli.root import cli

REPO = Path(__file__).resolve().parents[2]
SPLITWISE = REPO.parent / "shared" / "reference" / "measurements" / "splitwise_perf_model.csv"
L2 = catalog.model("llama-2-70b")
H100 = catalog.gpu("h100")

# The acceptance split: prompts 128/512/2048/8192 and batches 2/8/32 are fitted; prompts
# 256/1024/4096 and batches 4/16 are predicted. Batch 64 is dropped: at TP2 it measures
# ~800 ms against ~6,600 ms at batch 32 (SOURCES.md: probably where the KV did not fit).
HELD_OUT = prompt_split(frozenset({256, 1024, 4096}), frozenset({4, 16}))


def run(args: list[str]) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, args)
    return result.exit_code, result.stdout, result.stderr


# --- the terms ----------------------------------------------------------------------------


def test_allreduce_payload_is_the_ring_share_of_the_activations() -> None:
    # 2 (8 - 1) / 8 x 1024 tokens x 8192 hidden x 2 B = 29,360,128 B per GPU per all-reduce
    assert allreduce_payload_bytes(L2, 8, 1024) == 2 * 7 / 8 * 1024 * 8192 * 2
    assert allreduce_payload_bytes(L2, 1, 1024) == 0
    assert allreduces_per_step(L2, 8) == 160
    assert allreduces_per_step(L2, 1) == 0
    assert collective_hops(8) == 3
    assert collective_hops(1) == 0


def test_link_bandwidth_is_half_the_nvlink_total_else_pcie() -> None:
    assert link_bandwidth_bytes_per_s(H100) == 450e9
    assert link_bandwidth_bytes_per_s(catalog.gpu("l40s")) == 32e9
    bare = HardwareSpec(
        name="bare", peak_flops_bf16=1e12, hbm_bytes=1e9, hbm_bandwidth_bytes_per_s=1e9
    )
    with pytest.raises(BudgetError, match="no scale-up or PCIe"):
        link_bandwidth_bytes_per_s(bare)


def test_pipeline_terms() -> None:
    assert pipeline_bubble_fraction(4, 1) == 3 / 4
    assert pipeline_bubble_fraction(4, 13) == 3 / 16
    assert pipeline_bubble_fraction(1, 1) == 0
    assert pipeline_handoff_bytes(L2, 2, 100) == 100 * 8192 * 2
    with pytest.raises(BudgetError):
        pipeline_bubble_fraction(0, 1)


def test_no_profile_keeps_the_plain_roofline_exactly() -> None:
    plain = Deployment(hardware=H100, tensor_parallel=8)
    cost = step_cost(L2, plain, [SequenceWork(new_tokens=2048)])
    assert cost.collective_s == cost.launch_s == 0
    assert cost.time_s == max(cost.compute_s, cost.memory_s) + plain.step_overhead_s


def test_a_profile_adds_the_allreduce_launch_and_overheads() -> None:
    phase = PhaseProfile(
        compute_efficiency=0.5,
        memory_efficiency=0.8,
        link_efficiency=0.25,
        collective_latency_s=10e-6,
        layer_overhead_s=1e-3,
        step_overhead_s=2e-3,
        sequence_overhead_s=1e-4,
    )
    profile = StepProfile(name="t", gpu="h100", prefill=phase, decode=phase)
    deploy = Deployment(hardware=H100, tensor_parallel=8, profile=profile)
    n = 4096
    cost = step_cost(L2, deploy, [SequenceWork(new_tokens=n)])
    payload = 160 * (2 * 7 / 8 * n * 8192 * 2) / (450e9 * 0.25)
    assert cost.collective_s == pytest.approx(payload + 160 * 3 * 10e-6)
    assert cost.launch_s == pytest.approx(80e-3)
    assert cost.compute_flops_per_s == pytest.approx(8 * 989.4e12 * 0.5)
    gpu = max(cost.compute_s, cost.memory_s) + cost.collective_s
    assert cost.time_s == pytest.approx(max(80e-3, gpu) + 2e-3)
    # a decode step of 4 sequences: launch-bound, plus four sequence overheads
    dec = step_cost(L2, deploy, [SequenceWork(new_tokens=1, cached_tokens=1000)] * 4)
    assert dec.time_s == pytest.approx(80e-3 + 2e-3 + 4e-4)


# --- profiles and measurements ------------------------------------------------------------


def test_profile_toml_round_trips(tmp_path: Path) -> None:
    profile = StepProfile(
        name="h100-80gb",
        gpu="h100-80gb",
        engine="vllm",
        prefill=PhaseProfile(compute_efficiency=0.56, layer_overhead_s=6.7e-4),
        decode=PhaseProfile(memory_efficiency=0.8, sequence_overhead_s=2.6e-4),
        source="a test",
    )
    path = tmp_path / "p.toml"
    path.write_text(profiles_to_toml({profile.name: profile}, "header"))
    assert load_profiles(path) == {profile.name: profile}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("x = 1", "no \\[profiles.NAME\\]"),
        ('[profiles.a]\ngpu = "h100"\n[profiles.a.prefill]\n', "no \\[decode\\] table"),
        ("[profiles.a]\n[profiles.a.prefill]\n[profiles.a.decode]\n", 'needs gpu = "NAME"'),
        (
            '[profiles.a]\ngpu = "h100"\n[profiles.a.prefill]\ncompute_efficiency = 2\n'
            "[profiles.a.decode]\n",
            "compute_efficiency must be in",
        ),
        (
            '[profiles.a]\ngpu = "h100"\n[profiles.a.prefill]\nspeed = 2\n[profiles.a.decode]\n',
            "unknown keys speed",
        ),
    ],
)
def test_bad_profiles_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(BudgetError, match=message):
        profiles_from_toml(text, "p.toml")


def test_simple_csv_is_read_with_phases_and_medians() -> None:
    text = (
        "model,gpu,tp,tokens,batch,ms,phase\n"
        "llama-2-70b,h100,8,1024,1,80,prefill\n"
        "llama-2-70b,h100,8,1024,1,82,prefill\n"
        "llama-2-70b,h100,8,1024,1,90,prefill\n"
        "llama-2-70b,h100,8,2000,4,31,decode\n"
    )
    obs = measurements_from_csv(text, "m.csv")
    assert len(obs) == 2
    pre = next(o for o in obs if o.phase == "prefill")
    assert (pre.seconds, pre.repeats, pre.new_tokens) == (0.082, 3, 1024)
    dec = next(o for o in obs if o.phase == "decode")
    assert (dec.new_tokens, dec.cached_tokens, dec.batch) == (1, 2000, 4)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("a,b\n1,2\n", "not a measurement table"),
        ("model,gpu,tp,tokens,batch,ms\nm,g,x,1,1,1\n", "m.csv:2: tp must be a number"),
        ("model,gpu,tp,tokens,batch,ms\n", "no measurements"),
        ("model,gpu,tp,tokens,batch,ms,phase\nm,g,1,1,1,1,train\n", "phase must be"),
    ],
)
def test_bad_measurements_name_the_line(text: str, message: str) -> None:
    with pytest.raises(BudgetError, match=message):
        measurements_from_csv(text, "m.csv")


def test_fit_recovers_a_known_profile() -> None:
    """Points generated by a profile are fitted back to the same predictions."""
    truth = StepProfile(
        name="t",
        gpu="h100",
        prefill=PhaseProfile(compute_efficiency=0.55, link_efficiency=0.2, layer_overhead_s=6e-4),
        decode=PhaseProfile(
            memory_efficiency=0.8,
            collective_latency_s=3e-5,
            layer_overhead_s=3e-4,
            step_overhead_s=6e-3,
            sequence_overhead_s=2.5e-4,
        ),
    )
    points = []
    for tp in (2, 4, 8):
        for n in (128, 512, 2048, 8192):
            for phase, batch in (("prefill", 1), ("decode", 1), ("decode", 16)):
                decode = phase == "decode"
                o = Observation(
                    phase="decode" if decode else "prefill",
                    model="llama-2-70b",
                    gpu="h100",
                    tensor_parallel=tp,
                    new_tokens=1 if decode else n,
                    cached_tokens=n if decode else 0,
                    batch=batch,
                    prompt_tokens=n,
                    seconds=1.0,
                )
                t = observation_terms(L2, H100, o)
                points.append((L2, replace(o, seconds=t.time_s(truth))))
    fit = fit_profile("t", H100, points)
    assert max(r.abs_error for r in fit.residuals) < 0.01
    # No prefill point had a sequence decoding beside it: a mixed step's decoding
    # sequences cost what the decode points say (the truth's prefill phase has none).
    decode_cost = fit.profile.decode.sequence_overhead_s
    assert decode_cost == pytest.approx(2.5e-4, rel=0.05)
    assert fit.profile.prefill.sequence_overhead_s == decode_cost


# --- acceptance against the held-out half of Splitwise -----------------------------------


@pytest.fixture(scope="module")
def splitwise_fits() -> list[ProfileFit]:
    if not SPLITWISE.exists():
        pytest.skip(f"{SPLITWISE} is absent (the shared reference measurements)")
    observations = [o for o in load_measurements(SPLITWISE) if o.batch != 64]
    return fit_profiles(observations, model_of=catalog.model, gpu_of=catalog.gpu, held_out=HELD_OUT)


def test_one_profile_per_gpu_type(splitwise_fits: list[ProfileFit]) -> None:
    assert [f.profile.name for f in splitwise_fits] == ["a100-80gb", "h100-80gb", "h100-80gb-pcap"]


@pytest.mark.parametrize("gpu", ["a100-80gb", "h100-80gb", "h100-80gb-pcap"])
def test_held_out_prefill_and_decode_within_bounds(
    splitwise_fits: list[ProfileFit], gpu: str
) -> None:
    fit = next(f for f in splitwise_fits if f.profile.name == gpu)
    prefill = fit.select(phase="prefill", held_out=True, batched=False)
    # 3 prompt sizes x (Llama TP 2/4/8 + BLOOM TP8)
    assert len(prefill) == 12
    assert {r.observation.tensor_parallel for r in prefill} == {2, 4, 8}
    assert {r.observation.model for r in prefill} == {"llama2-70b", "bloom-176b"}
    assert max(r.abs_error for r in prefill) <= 0.25, _table(prefill)
    assert statistics.median(r.abs_error for r in prefill) <= 0.10, _table(prefill)
    decode = fit.select(phase="decode", held_out=True, batched=False)
    assert len(decode) == 12
    assert max(r.abs_error for r in decode) <= 0.25, _table(decode)
    # batched rows (4 and 16 x 512 prompts): reported in docs/arithmetic.md; guarded here
    batched = fit.select(phase="decode", held_out=True, batched=True)
    assert statistics.median(r.abs_error for r in batched) <= 0.10, _table(batched)
    batched_prefill = fit.select(phase="prefill", held_out=True, batched=True)
    assert statistics.median(r.abs_error for r in batched_prefill) <= 0.25, _table(batched_prefill)


def _table(rows: Sequence[Residual]) -> str:
    return "\n".join(map(str, rows))


def test_the_plain_roofline_misses_what_the_profile_catches(
    splitwise_fits: list[ProfileFit],
) -> None:
    """Without a profile, H100 TP8 decode is predicted at about a fifth of the measured
    30 ms (the issue's finding); the profile is within 10%."""
    fit = next(f for f in splitwise_fits if f.profile.name == "h100-80gb")
    r = next(
        r
        for r in fit.select(phase="decode", batched=False)
        if r.observation.tensor_parallel == 8
        and r.observation.model == "llama2-70b"
        and r.observation.prompt_tokens == 1024
    )
    plain = step_cost(
        L2,
        Deployment(hardware=H100, tensor_parallel=8),
        [SequenceWork(new_tokens=1, cached_tokens=r.observation.cached_tokens)],
    )
    assert plain.time_s / r.observation.seconds < 0.3
    assert r.abs_error < 0.10


# --- the CLI ------------------------------------------------------------------------------


def test_plan_calibrate_writes_a_profile_that_plan_uses(tmp_path: Path) -> None:
    if not SPLITWISE.exists():
        pytest.skip(f"{SPLITWISE} is absent (the shared reference measurements)")
    out = tmp_path / "profile.toml"
    code, text, err = run(
        ["plan", "calibrate", str(SPLITWISE), "-o", str(out), "--hold-out-prompts",
         "256,1024,4096", "--hold-out-batches", "4,16", "--exclude-batches", "64"]
    )  # fmt: skip
    assert code == 0, err
    assert "prefill batch 1 held out: 12 points" in text
    assert "ratio" in text
    assert "held out" in text
    assert set(load_profiles(out)) == {"a100-80gb", "h100-80gb", "h100-80gb-pcap"}
    base = ["plan", "--model", "llama-2-70b", "--gpu", "h100-80gb", "--gpus", "8",
            "--prompt-tokens", "2048", "--batch", "1", "--json"]  # fmt: skip
    code, plain, _ = run(base)
    assert code == 0
    code, profiled, _ = run([*base, "--profile", str(out)])
    assert code == 0
    t_plain = next(p["value"] for p in json.loads(plain)["prediction"] if p["key"] == "tpot_s")
    t_prof = next(p["value"] for p in json.loads(profiled)["prediction"] if p["key"] == "tpot_s")
    # measured 31 ms at TP8, 2048 tokens (Splitwise): the profile lands near it
    assert t_plain < 0.015 < 0.025 < t_prof < 0.040
    code, _, err = run([*base, "--profile", str(out), "--gpu", "b200"])
    assert code == 2
    assert "no profile for gpu 'b200'" in err


def test_plan_calibrate_on_a_missing_column_is_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "m.csv"
    bad.write_text("a,b\n1,2\n")
    code, _, err = run(["plan", "calibrate", str(bad), "-o", str(tmp_path / "p.toml")])
    assert code == 2
    assert "not a measurement table" in err


def test_prompt_beyond_context_names_both_numbers() -> None:
    code, out, err = run(["plan", "--model", "llama-3.3-70b", "--gpu", "h200",
                          "--prompt-tokens", "1000000"])  # fmt: skip
    assert code == 2
    assert "1000000" in err
    assert "131072" in err
    assert "TPOT" not in out


def test_weights_that_do_not_fit_exit_1_without_kv_figures() -> None:
    code, out, _ = run(["plan", "--model", "llama-3.1-405b", "--gpu", "h100", "--gpus", "2"])
    assert code == 1
    assert "DOES NOT FIT" in out
    assert "need 12 GPUs" in out
    assert "KV capacity:" not in out
    assert "TPOT at" not in out
    assert "throughput at" not in out
    assert "tokens/s" not in out


# --- the profile plugged into the simulator and the decomposition --------------------------

_PROFILE_TOML = """
[profiles.h100]
gpu = "h100"

[profiles.h100.prefill]
compute_efficiency = 0.5
layer_overhead_s = 0.0005

[profiles.h100.decode]
memory_efficiency = 0.8
layer_overhead_s = 0.0003
step_overhead_s = 0.005
"""


def test_simulator_and_decomposition_time_steps_with_the_profile(tmp_path: Path) -> None:
    from analyzers.decompose.model import BudgetModel
    from loadgen.sim.physics import HardwareChoice, Physics

    path = tmp_path / "p.toml"
    path.write_text(_PROFILE_TOML)
    profile = load_profiles(path)["h100"]
    model = catalog.model("llama-3.1-8b")
    work = [SequenceWork(new_tokens=1, cached_tokens=500)] * 4
    want = step_cost(model, Deployment(hardware=H100, profile=profile), work).time_s
    # decode: 32 layers x 0.3 ms launch floor + 5 ms step overhead
    assert want == pytest.approx(32 * 0.0003 + 0.005)
    phys = Physics(HardwareChoice(model="llama-3.1-8b", gpu="h100-sxm", profile=path))
    assert phys.step_s(work) == pytest.approx(want)
    plain = Physics(HardwareChoice(model="llama-3.1-8b", gpu="h100"))
    plain_s = step_cost(model, Deployment(hardware=H100), work).time_s
    assert plain.step_s(work) == pytest.approx(plain_s)
    assert plain_s < 0.6 * want
    budget = BudgetModel.from_catalog("llama-3.1-8b", "h100", profile_file=path)
    assert budget.deployment.profile == profile


def test_a_profile_without_the_gpu_is_a_one_line_error(tmp_path: Path) -> None:
    path = tmp_path / "p.toml"
    path.write_text(_PROFILE_TOML)
    code, _, err = run(["decompose", str(tmp_path), "--model", "llama-3.1-8b", "--gpu", "a100",
                        "--profile", str(path)])  # fmt: skip
    assert code == 2
    assert "no profile for gpu 'a100'" in err
    budget = tmp_path / "budget.toml"
    code, _, err = run(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--out", str(budget)])
    assert code == 0, err
    code, _, err = run(
        ["decompose", str(tmp_path), "--budget", str(budget), "--profile", str(path)]
    )
    assert code == 2
    assert "--profile goes with --model/--gpu or --deployment" in err


def test_a_budget_file_carries_its_profile_and_refusal(tmp_path: Path) -> None:
    from analyzers.budget import load_budget

    path = tmp_path / "p.toml"
    path.write_text(_PROFILE_TOML)
    out = tmp_path / "budget.toml"
    code, _, err = run(["plan", "--model", "llama-3.1-8b", "--gpu", "h100", "--profile",
                        str(path), "--out", str(out)])  # fmt: skip
    assert code == 0, err
    report = load_budget(out)
    assert report.deployment.profile == load_profiles(path)["h100"]
    assert report.refusal == ""
    code, _, _ = run(["plan", "--model", "llama-3.1-405b", "--gpu", "h100", "--out", str(out)])
    assert code == 1
    assert load_budget(out).refusal.startswith("DOES NOT FIT")


def test_a_request_whose_kv_does_not_fit_exits_1_without_tpot() -> None:
    """70B FP8 on one H100 leaves 1.45 GB (4,425 tokens) of KV: a 100k prompt cannot run."""
    code, out, _ = run(["plan", "--model", "llama-3.3-70b", "--gpu", "h100", "--dtype", "fp8",
                        "--prompt-tokens", "100000"])  # fmt: skip
    assert code == 1
    assert "one request of 100256 tokens needs 32.85 GB" in out
    assert "4,425 tokens" in out
    assert "TPOT at" not in out
    assert "break-even" not in out.lower()


def test_mixed_step_points_fit_the_prefill_phases_own_sequence_cost() -> None:
    """Prefills timed beside decoding sequences (vLLM's mixed steps) show what each such
    sequence adds to a prefill step: the prefill phase fits it, instead of taking the
    decode phase's."""
    truth = StepProfile(
        name="t",
        gpu="h100",
        prefill=PhaseProfile(
            compute_efficiency=0.55, step_overhead_s=2e-3, sequence_overhead_s=5e-3
        ),
        decode=PhaseProfile(
            memory_efficiency=0.8, step_overhead_s=6e-3, sequence_overhead_s=2.5e-4
        ),
    )
    points = []
    for n in (128, 512, 2048, 8192):
        for phase, batch, decoding in (
            ("prefill", 1, 0), ("prefill", 1, 1), ("prefill", 1, 4),
            ("decode", 1, 0), ("decode", 16, 0),
        ):  # fmt: skip
            decode = phase == "decode"
            o = Observation(
                phase="decode" if decode else "prefill",
                model="llama-2-70b",
                gpu="h100",
                tensor_parallel=2,
                new_tokens=1 if decode else n,
                cached_tokens=n if decode else 0,
                batch=batch,
                prompt_tokens=n,
                seconds=1.0,
                decoding=decoding,
            )
            t = observation_terms(L2, H100, o)
            points.append((L2, replace(o, seconds=t.time_s(truth))))
    fit = fit_profile("t", H100, points)
    assert max(r.abs_error for r in fit.residuals) < 0.01
    assert fit.profile.prefill.sequence_overhead_s == pytest.approx(5e-3, rel=0.05)
    assert len(fit.select(phase="prefill", mixed=True)) == 8


def test_only_a_prefill_has_sequences_decoding_beside_it() -> None:
    with pytest.raises(BudgetError, match="only a prefill step"):
        Observation(
            phase="decode", model="m", gpu="g", tensor_parallel=1, new_tokens=1,
            prompt_tokens=1, seconds=1.0, decoding=1,
        )  # fmt: skip
