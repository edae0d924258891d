"""scripts/gpu/check_gptj_inflight.py's options, which must work on a machine without a GPU or triton (its steps
run on a GPU only, but ``profile``, which runs on the tiny model in float32 too: its figures matter on a GPU only)."""

from __future__ import annotations

import json
import math

import pytest

from code.gptj.inflight.layers import InflightModel
from code.llama31.inflight_model import DECODE_LAUNCH as LLAMA_LAUNCH
from code.llm.paged_attention import DECODE_LAUNCH
from scripts.gpu.check_gptj_inflight import (
    DECODE_HEADS_CHOICES,
    DEFAULT_VARIANTS,
    LLAMA_DECODE,
    LLAMA_HEADS_CHOICES,
    STEPS,
    launch_name,
    main,
    parse_args,
    parse_variant,
    prepare,
    steps_in_order,
)


def test_help_runs_without_a_gpu(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--steps" in capsys.readouterr().out


def test_steps_run_in_their_own_order_and_all_by_default(tmp_path):
    assert steps_in_order(parse_args(["--out", str(tmp_path)]).steps) == list(STEPS)
    assert list(STEPS)[:2] == ["attention", "decode_splits"]
    assert steps_in_order("hf,decode_splits") == ["decode_splits", "hf"]


def test_a_model_step_chosen_alone_gets_the_model_loaded_first():
    assert steps_in_order("variants") == ["load", "variants"]
    assert steps_in_order("agreement,attention") == ["attention", "load", "agreement"]
    assert steps_in_order("variants,splits") == ["load", "splits", "variants"]  # variants frees the model after


def test_profile_is_a_step_that_draws_its_own_model(tmp_path):
    assert steps_in_order("profile") == ["profile"]
    assert steps_in_order("profile,variants") == ["load", "variants", "profile"]  # last: it takes what load drew
    defaults = parse_args(["--out", str(tmp_path)])
    assert (defaults.slots, defaults.device, defaults.model) == (256, "cuda", "6b")  # the FP8 engine's batch


@pytest.mark.usefixtures("one_torch_thread")
def test_the_profile_step_runs_on_the_cpu_and_writes_its_tables(tmp_path, capsys, monkeypatch):
    """The profile step on the tiny model: the engine's own decode step (``engine._step``: beam search, then the
    model's decode) of 4 slots x 4 beams, every slot holding the prompt of the same index (its length in the cache)
    and all stepping (two warm-up steps and a timed one before the profiled fourth); on the CPU the events are
    operators (no kernels by name), the kinds sum to the total, the top list is sorted, both tables are written."""
    decoded = []
    decode = InflightModel.decode

    def recorded(self, tokens, cache, ancestry, gen_count, *args, **kwargs):  # noqa: ANN001, ANN202 - a spy
        decoded.append((tokens.numel(), cache.prompt_lengths[:4].tolist(), gen_count.tolist()))
        return decode(self, tokens, cache, ancestry, gen_count, *args, **kwargs)

    monkeypatch.setattr(InflightModel, "decode", recorded)
    argv = ["--out", str(tmp_path), "--device", "cpu", "--model", "tiny", "--steps", "profile", "--slots", "4"]
    main(argv)
    out = capsys.readouterr().out
    assert "profile (FP8 GEMMs; prefill" in out and "step 4 slots x 4 beams;" in out and "FAILED" not in out, out
    lengths = [len(p) for p in prepare(parse_args(argv)).prompts[:4]]
    assert decoded == [(16, lengths, [n] * 4) for n in (1, 2, 3, 4)]
    details = json.loads((tmp_path / "gptj_inflight.json").read_text())
    assert details["device"] == "cpu" and list(details["step_s"]) == ["profile"]
    result = details["profile"]
    assert (result["step"]["slots"], result["step"]["beams"]) == (4, 4)
    assert result["prefill"]["tokens"] == sum(lengths)  # 4 prompts of ~900 tokens: one pass of 16,384 holds them
    for name in ("prefill", "step"):
        r = result[name]
        assert list(r["kinds"]) == ["attention", "gemm", "other"]
        assert r["total_ms"] > 0 and math.isclose(sum(r["kinds"].values()), r["total_ms"], rel_tol=1e-3, abs_tol=1e-2)
        times = [ms for _, ms in r["top"]]
        assert times == sorted(times, reverse=True) and len(times) == 12
        table = (tmp_path / f"profile_{name}.txt").read_text()
        assert "Self CPU" in table and r["top"][0][0] in table
        assert f"\n  {name:<8} total {r['total_ms']:.2f}  attention " in out


def test_the_splits_options_parse(tmp_path):
    args = parse_args(["--out", str(tmp_path), "--steps=splits", "--split-slots=1,2", "--repeats=5", "--sms=58"])
    assert (args.split_slots, args.repeats, args.sms) == ("1,2", 5, 58)
    defaults = parse_args(["--out", str(tmp_path)])
    assert (defaults.split_slots, defaults.sms) == ("1,4,16", 0)  # 0: the GPU's own SM count


def test_an_unknown_step_names_the_choices(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--out", str(tmp_path), "--steps=decode_splits,split"])
    assert "--steps: unknown steps ['split']: choose among attention,decode_splits," in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse_args(["--out", str(tmp_path), "--skip=hff"])
    assert "--skip: unknown steps ['hff']" in capsys.readouterr().err


def test_variants_name_fast_accumulation_and_the_defaults_parse():
    assert parse_variant("fp8fast/fp8/256/forced") == {"name": "fp8fast/fp8/256/forced", "gemms": "fp8fast",
                                                       "kv": "fp8", "slots": 256, "outputs": "forced",
                                                       "elementwise": "fused"}
    defaults = [parse_variant(text) for text in DEFAULT_VARIANTS.split(",")]
    assert any(v["gemms"] == "fp8fast" for v in defaults)  # the configs' first engine
    fp8 = [i for i, v in enumerate(defaults) if v["gemms"].startswith("fp8")]
    assert fp8 == list(range(fp8[0], len(defaults)))  # bf16 variants first: the FP8 switch frees their weights
    with pytest.raises(SystemExit, match=r"bf16\|fp8\|fp8fast"):
        parse_variant("fp8fast2/fp8/256/forced")


def test_decode_heads_launches_start_from_todays_and_have_distinct_names():
    """The first launch is each table's baseline (today's DECODE_LAUNCH), and a name says HEADS and SPLITS, so no
    two launches share a row of the JSON."""
    for choices, kv_heads, today in ((DECODE_HEADS_CHOICES, 16, DECODE_LAUNCH),
                                     (LLAMA_HEADS_CHOICES, LLAMA_DECODE["kv_heads"], LLAMA_LAUNCH)):
        assert choices[0] == today
        names = [launch_name(launch) for launch in choices]
        assert len(set(names)) == len(names)
        assert {launch["HEADS"] for launch in choices} == {1, 2, 4}
        assert all(kv_heads % launch["HEADS"] == 0 for launch in choices)
    assert launch_name({"KEYS": 32, "num_warps": 8, "num_stages": 3, "SPLITS": 2, "HEADS": 4}) == "k32w8s3x2h4"
    assert launch_name({"KEYS": 64, "num_warps": 4, "num_stages": 3, "SPLITS": 1, "HEADS": 1}) == "k64w4s3"
