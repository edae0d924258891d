"""scripts/gpu/check_llama_inflight.py without a GPU: its options, and steps run on the tiny model in float32 (their
figures matter on a GPU only)."""

from __future__ import annotations

import json
import math

import pytest

from scripts.gpu.check_llama_inflight import FP8_VARIANTS, STEPS, main, parse_args

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_help_runs_without_a_gpu(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    assert "--steps" in capsys.readouterr().out


def test_an_unknown_step_names_the_choices(tmp_path, capsys):
    assert parse_args(["--out", str(tmp_path)]).steps == ",".join(STEPS)
    with pytest.raises(SystemExit):
        parse_args(["--out", str(tmp_path), "--steps=prefill,decode"])
    assert "--steps: unknown steps ['decode']" in capsys.readouterr().err


def test_the_prefill_step_runs_on_the_cpu(tmp_path):
    main(["--out", str(tmp_path), "--device", "cpu", "--model", "tiny", "--steps", "prefill", "--prompts", "3",
          "--length_scale", "0.05"])
    result = json.loads((tmp_path / "llama_inflight.json").read_text())["prefill"]
    assert result["argmax_agree"] == 3 and result["rel_error"] < 1e-5


def test_the_fp8_step_runs_on_the_cpu_and_prints_its_table(tmp_path, capsys):
    """The fp8 step on the tiny model (FP8 emulated in float32 on the CPU): a table row for each engine, finite
    positive times, and errors against float32 within bounds: the float32 engine's rounding only (< 1e-5), FP8's
    a few percent (0.023 prefill and 0.025 decode measured; e4m3 rounds each operand by up to 2**-4; bound 0.06,
    as tests/llama31/test_inflight.py's FP8 GEMMs), the FP8 cache's decode no better than the 16-bit cache's."""
    main(["--out", str(tmp_path), "--device", "cpu", "--model", "tiny", "--steps", "fp8", "--prompts", "3",
          "--slots", "4", "--length_scale", "0.05", "--calibration_prompts", "4"])
    out = capsys.readouterr().out
    table = out[out.index("fp8 (4 slots;"):]
    for label in ("float32 ", "fp8 gemms ", "fp8 gemms+kv "):
        assert f"\n  {label}" in table, table
    result = json.loads((tmp_path / "llama_inflight.json").read_text())["fp8"]
    assert list(result) == ["calibration", *FP8_VARIANTS]
    for name in FP8_VARIANTS:
        r = result[name]
        assert r["prefill_ms"] > 0 and r["step_ms"] > 0 and r["prefill_tokens"] > 0, (name, r)
        errors = [r["prefill_rel_error"], r["decode_rel_error"]]
        assert all(math.isfinite(e) for e in errors), (name, r)
        assert max(errors) < (1e-5 if name == "16-bit" else 0.06), (name, r)
    assert result["fp8 gemms+kv"]["decode_rel_error"] >= result["fp8 gemms"]["decode_rel_error"] * 0.9


def test_the_fp8_gemms_step_prices_one_gemms_rounding(tmp_path, capsys):
    """Layer 0's four GEMMs on the tiny model: FP8's output error is e4m3's (a few percent: 3.7e-2 measured), an
    order of magnitude above bf16-rounded operands' (2.8e-3), for every GEMM."""
    main(["--out", str(tmp_path), "--device", "cpu", "--model", "tiny", "--steps", "fp8_gemms", "--prompts", "3",
          "--length_scale", "0.05", "--calibration_prompts", "4"])
    assert "fp8_gemms (layer 0," in capsys.readouterr().out
    result = json.loads((tmp_path / "llama_inflight.json").read_text())["fp8_gemms"]
    assert set(result) == {"qkv", "out", "gate_up", "down"}
    for errors in result.values():
        assert 0.01 < errors["fp8_rel_error"] < 0.06
        assert 0 < errors["bf16_rel_error"] < errors["fp8_rel_error"] / 5


def test_the_profile_step_groups_kernels_and_writes_its_tables(tmp_path, capsys):
    """On the CPU the profile's events are operators (no GEMM kernels by name): the kinds sum to the total, the
    top list is sorted, both tables are written; on a GPU the same step names cuBLASLt's and FlashAttention's
    (tests/scripts/test_inflight_profile.py: the kinds of their names)."""
    main(["--out", str(tmp_path), "--device", "cpu", "--model", "tiny", "--steps", "profile", "--slots", "4",
          "--length_scale", "0.05", "--calibration_prompts", "2"])
    assert "profile (FP8 GEMMs; prefill" in capsys.readouterr().out
    result = json.loads((tmp_path / "llama_inflight.json").read_text())["profile"]
    for name in ("prefill", "step"):
        r = result[name]
        assert r["total_ms"] > 0 and math.isclose(sum(r["kinds"].values()), r["total_ms"], rel_tol=1e-3, abs_tol=1e-2)
        times = [ms for _, ms in r["top"]]
        assert times == sorted(times, reverse=True)
        assert (tmp_path / f"profile_{name}.txt").stat().st_size > 0
    assert result["step"]["slots"] == 4 and "beams" not in result["step"] and result["prefill"]["tokens"] > 0


def test_the_splits_step_runs_on_the_cpu_and_prints_its_table(tmp_path, capsys):
    """The splits step on the tiny model, the rule filling 132 SMs (``--sms``): 200-token prompts allow 3 splits of
    a 64-token page each, above the tiny model's fixed 2, at 1 and 4 slots alike (one key/value head: 1 x 1 x 3
    programs are far from 264); a row per cache and slot count with positive times. On the CPU both launches run
    the reference attention, so they agree exactly (the GPU's rows tell the kernels' difference)."""
    main(["--out", str(tmp_path), "--device", "cpu", "--model", "tiny", "--steps", "splits", "--length_scale", "0.2",
          "--sms", "132", "--repeats", "2", "--split_slots", "1,4"])
    out = capsys.readouterr().out
    table = out[out.index("splits (132 SMs; 200-token prompts, 64 generated;"):]
    for name in ("float32 1 ", "float32 4 ", "fp8 1 ", "fp8 4 "):
        assert f"\n  {name}" in table and "FAILED" not in table, table
    result = json.loads((tmp_path / "llama_inflight.json").read_text())["splits"]
    assert (result["sms"], result["prompt"], result["generated"]) == (132, 200, 64)
    for r in result["cases"].values():
        assert (r["splits_old"], r["splits_new"]) == (2, 3), r
        assert r["ms_old"] > 0 and r["ms_new"] > 0 and r["speedup"] > 0
        assert r["max_abs_error"] == 0 and r["rel_error"] == 0 and r["new_vs_reference"] == 0


def test_plain_elementwise_is_the_baseline_run(tmp_path, capsys):
    """``--plain_elementwise``: the engine's model runs the plain elementwise functions in every pass (the
    baseline of the fused kernels, which a GPU run without the flag uses); the run says so in its title and JSON."""
    from code.llama31 import elementwise
    from scripts.gpu.check_llama_inflight import Check

    args = parse_args(["--out", str(tmp_path), "--device", "cpu", "--model", "tiny", "--plain_elementwise"])
    check = Check(args)
    inflight = check.inflight(check.model())
    assert not inflight.elementwise.compiled and inflight.elementwise.prefill.norm_in is elementwise.norm_in
    assert not parse_args(["--out", str(tmp_path)]).plain_elementwise
    main(["--out", str(tmp_path), "--device", "cpu", "--model", "tiny", "--steps", "prefill", "--prompts", "2",
          "--length_scale", "0.05", "--plain_elementwise"])
    assert "plain elementwise" in capsys.readouterr().out
    assert json.loads((tmp_path / "llama_inflight.json").read_text())["plain_elementwise"] is True
