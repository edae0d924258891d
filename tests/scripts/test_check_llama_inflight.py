"""scripts/gpu/check_llama_inflight.py without a GPU: its options, and a step run on the tiny model in float32 (its
figures matter on a GPU only)."""

from __future__ import annotations

import json

import pytest

from scripts.gpu.check_llama_inflight import STEPS, main, parse_args

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
