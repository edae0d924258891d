"""GPT-J 6B on CNN/DailyMail: settings every GPT-J config shares, and the engine ladder of the H100/H200 classes.

The closed-division rules fix generation (beam search width 4, 30 to 128 new tokens); ``num_beams`` exists for
the open division and debugging, and a run with another width is marked as not a valid result.
"""

from typing import Any

from code.common.constants import Benchmark
from code.config.ladder import Rung
from configs.configuration import BenchmarkConfiguration


def gptj_ladder(fp8: dict[str, Any], fp8_gemms: dict[str, Any], bf16: dict[str, Any],
                fast: dict[str, Any] | None = None) -> tuple[Rung, ...]:
    """GPT-J's engines on an H100/H200 (the inflight backend), fastest first, each with its slots and rates; one
    ladder for gptj-99 and gptj-99.9 (``fast``: the fast-accumulation engine's, where they differ from ``fp8``'s).

    FP8 GEMMs and KV cache first: every NVIDIA-code GPT-J submission serves both targets from such an engine, and it
    runs well above bf16's rate (its half-size cache holds 256 samples in flight). No proxy settles whether it keeps
    99.9% of the reference's ROUGE (the proxies' own float32 and bf16 differ by more), so the real accuracy run
    decides. The top rung adds cuBLASLt's fast accumulation: a faster engine whose prefill logits are as far from
    the float32 model's as with float32 accumulation. Then FP8 GEMMs with a bf16 KV cache, then bf16 throughout
    (the class's own values). Measured: gptj-ladder-2026-11-28 (documentation/notes/journal/)."""
    return (
        Rung("fp8-fast-accum", "FP8 GEMMs with cuBLASLt fast accumulation and an FP8 KV cache", precision="fp8",
             kv_cache_dtype="fp8", fp8_fast_accum=True, **(fp8 if fast is None else fast)),
        Rung("fp8", "FP8 GEMMs and KV cache, as NVIDIA's GPT-J submissions run both targets; float32 accumulation",
             precision="fp8", kv_cache_dtype="fp8", fp8_fast_accum=False, **fp8),
        Rung("fp8-gemms", "FP8 GEMMs, bf16 KV cache", precision="fp8", kv_cache_dtype="auto", fp8_fast_accum=False,
             **fp8_gemms),
        Rung("bf16", "bf16 GEMMs and KV cache", precision="bf16", kv_cache_dtype="auto", fp8_fast_accum=False,
             **bf16),
    )


class GptjBaseConfig(BenchmarkConfiguration):
    """Benchmark-wide defaults; scenario bases and system classes override them."""

    benchmark = Benchmark.GPTJ
    model_name = "6b"
    num_beams = 4
    sort_by_length = True


# GPT-J-6B generation with beam 4 takes minutes per sample on a CPU, so the CPU classes run random-weight runs on
# the tiny GPT-J-architecture model (model_name applies to random weights; a downloaded checkpoint brings its own
# architecture).
CPU_MODEL = "tiny"
