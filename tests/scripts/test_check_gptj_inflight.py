"""scripts/gpu/check_gptj_inflight.py's options, which must work on a machine without a GPU or triton (its steps
run on a GPU only)."""

from __future__ import annotations

import pytest

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
