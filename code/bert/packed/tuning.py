"""Tile tuning of the packed attention kernel (``attention.varlen_attention``): time each candidate tile shape on a
realistic packed batch once, at engine load, and keep the fastest.

The batch's lengths come from the dataset's length model (``BertFeatures.synthetic``, documentation/bert.md), the
same one synthetic runs use, so the tiles are chosen on the lengths the benchmark sees.
"""

from __future__ import annotations

import math
import warnings

import torch

from code.bert.dataset import BertFeatures
from code.bert.packed import attention

TUNING_FEATURES = 512  # ~83k tokens: what one Offline batch of BERT-large holds


def tuning_lengths(count: int = TUNING_FEATURES, seed: int = 0) -> list[int]:
    """Real lengths of ``count`` synthetic SQuAD-like features (the dataset's length model)."""
    return [int(n) for n in BertFeatures.synthetic(count, seed=seed).lengths]


def tune(
    num_heads: int,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device | str,
    lengths: list[int] | None = None,
    iterations: int = 20,
    with_bias: bool = True,
    out_q_scale: float | None = None,
    candidates: list[attention.AttentionConfig] | None = None,
    fp8_input: bool = False,
) -> dict[attention.AttentionConfig, float]:
    """Time each candidate config on a realistic packed batch. Returns ``{config: ms per call}`` (``inf`` for a
    config that failed, e.g. out of shared memory at a large head_dim); ``fastest`` picks the winner, which the
    caller keeps with its model (one choice per model instance: two models on two GPUs each keep their own).

    ``lengths`` default: ``tuning_lengths()``, 512 SQuAD-like features (~83k tokens, what one Offline batch of
    BERT-large holds). Each
    config is launched once (compiles it), then timed with CUDA events over ``iterations`` calls, three times; the
    median of the three counts. The batch (~0.5 GB of qkv at BERT-large) is larger than L2, as in the model.
    Call before capturing CUDA graphs: it compiles and synchronizes. ``fp8_input``: time the kernel an FP8
    attention runs (e4m3 q, k, v without a bias, the FP8 q.k dot) instead.
    """
    if torch.device(device).type != "cuda":
        raise ValueError(f"tune times CUDA kernels; got device {device}")
    lengths = lengths if lengths is not None else tuning_lengths()
    qkv, cu, bias = attention.packed_batch(lengths, num_heads, head_dim, dtype, device)
    if fp8_input:  # O(1) values: unit scales keep them well inside e4m3's range
        qkv, bias, with_bias = qkv.to(attention.E4M3), None, False
    fp8_args = {"qkv_scales": (1.0, 1.0, 1.0), "fp8_qk_dot": True} if fp8_input else {}
    max_len = max(lengths, default=1)
    out_dtype = attention.E4M3 if out_q_scale else (torch.float16 if fp8_input else dtype)
    out = torch.empty((qkv.shape[0], num_heads * head_dim), dtype=out_dtype, device=qkv.device)
    scale = 1.0 / math.sqrt(head_dim)
    results: dict[attention.AttentionConfig, float] = {}
    for cfg in candidates or attention.CANDIDATE_CONFIGS:

        def call(cfg: attention.AttentionConfig = cfg) -> None:
            attention.varlen_attention(
                qkv,
                cu,
                max_len,
                scale,
                num_heads,
                qkv_bias=bias if with_bias else None,
                out=out,
                out_q_scale=out_q_scale,
                config=cfg,
                **fp8_args,
            )

        try:
            call()
            torch.cuda.synchronize(qkv.device)
            times = []
            for _ in range(3):
                begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                begin.record()
                for _ in range(iterations):
                    call()
                end.record()
                end.synchronize()
                times.append(begin.elapsed_time(end) / iterations)
            results[cfg] = sorted(times)[1]
        except Exception as e:  # e.g. triton's OutOfResources for a large tile at head_dim 128: not a candidate here
            warnings.warn(f"tune: {cfg} failed: {type(e).__name__}: {e}", stacklevel=2)
            results[cfg] = float("inf")
    return results


def fastest(results: dict[attention.AttentionConfig, float]) -> attention.AttentionConfig:
    """The fastest config of a ``tune`` result; ``attention.DEFAULT_CONFIG`` when every candidate failed."""
    best = min(results, key=results.__getitem__, default=attention.DEFAULT_CONFIG)
    return best if math.isfinite(results.get(best, math.inf)) else attention.DEFAULT_CONFIG
