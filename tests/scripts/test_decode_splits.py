"""scripts/gpu/decode_splits.py (the GPU checks' ``splits`` step) on the CPU with the tiny GPT-J model: beam search's
rows (4 a slot) through both engines, the table and the rule's SPLITS; the figures matter on a GPU only
(check_llama_inflight's CPU test runs the same cases through its script)."""

from __future__ import annotations

import pytest
import torch

from code.gptj.inflight.layers import InflightModel
from code.gptj.model import GPTJ_CONFIGS, random_weights
from code.llm.generation import GenerationConfig
from code.llm.paged_attention import DECODE_LAUNCH
from scripts.gpu.decode_splits import SplitCases

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_gptj_cases_run_with_four_beams_and_the_rule_at_58_sms():
    """Tiny GPT-J: 4 heads, 2 a program (2 groups); 58 SMs want 116 programs, 256-token prompts allow 4 splits of a
    64-token page: 1 slot takes 4 (capped), 16 slots 3 (16 x 2 x 3 = 96 <= 116), 64 slots the fixed 1."""
    tiny = GPTJ_CONFIGS["tiny"]
    saves = []
    cases = SplitCases(InflightModel.from_model(random_weights(tiny, 0)), GenerationConfig(max_new_tokens=8),
                       torch.device("cpu"), torch.float32, q_heads=tiny.n_head, layers=tiny.n_layer, sms=58,
                       prompt_tokens=256, repeats=1)
    found = cases.run([1, 16, 64], "float32", lambda: saves.append(1))
    assert len(saves) == 6 and (found["sms"], found["generated"]) == (58, 4)
    splits = {name: (r["splits_old"], r["splits_new"]) for name, r in found["cases"].items()}
    assert splits == {f"{kv} {slots}": (DECODE_LAUNCH["SPLITS"], new) for kv in ("float32", "fp8")
                      for slots, new in ((1, 4), (16, 3), (64, 1))}, found
    assert all(r["new_vs_reference"] == 0 for r in found["cases"].values())
    rows = cases.rows(found)
    assert rows[0].startswith("splits (58 SMs; 256-token prompts, 4 generated;") and len(rows) == 2 + 6
    assert not any("FAILED" in row for row in rows)
