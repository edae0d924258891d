"""scripts/gpu/check_gptj_inflight.py's options, which must work on a machine without a GPU or triton (its steps
run on a GPU only)."""

from __future__ import annotations

import pytest

from scripts.gpu.check_gptj_inflight import DEFAULT_VARIANTS, STEPS, main, parse_args, parse_variant, steps_in_order


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


def test_an_unknown_step_names_the_choices(tmp_path, capsys):
    with pytest.raises(SystemExit):
        parse_args(["--out", str(tmp_path), "--steps=decode_splits,splits"])
    assert "--steps: unknown steps ['splits']: choose among attention,decode_splits," in capsys.readouterr().err
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
