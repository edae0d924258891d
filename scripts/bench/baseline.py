"""The baseline every figure is compared with: HF transformers' BERT and GPT-J as the MLCommons references run them.

Why: a ratio to a known implementation on the same device says more than a bare figure from a lent machine.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any


def _p90(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)]


def measure_baseline(
    model_name: str,
    device: str,
    attention: str = "sdpa",
    seconds_per_repeat: float = 2.0,
    repeats: int = 5,
    warmup: int = 5,
    seed: int = 0,
) -> dict[str, Any]:
    """HF ``BertForQuestionAnswering`` as the MLCommons reference runs it: float32, batch 1, padded to 384.

    Random init of our model's architecture (``model_name``), inputs from the synthetic set padded to 384 tokens,
    each sample copied to the device and its logits back (the reference's ``.cpu()``), which also synchronises.
    Samples/s is the median over ``repeats`` timed runs of ~``seconds_per_repeat`` each, after ``warmup`` samples.
    """
    import numpy as np
    import torch
    import transformers

    from code.bert.dataset import BertFeatures
    from code.bert.model import BERT_CONFIGS, hf_config

    config = hf_config(BERT_CONFIGS[model_name], attn_implementation=attention)
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.BertForQuestionAnswering(config)
    model = model.float().eval()
    features = BertFeatures.synthetic(256, seed=seed)
    cuda = torch.device(device).type == "cuda"

    def sync() -> None:
        if cuda:
            torch.cuda.synchronize(device)

    def one(index: int) -> float:
        row = index % len(features)
        started = time.perf_counter()
        ids, seg, mask = (
            torch.from_numpy(a[row : row + 1].astype(np.int64)).to(device)
            for a in (features.input_ids, features.segment_ids, features.input_mask)
        )
        output = model(input_ids=ids, token_type_ids=seg, attention_mask=mask)
        output.start_logits.cpu(), output.end_logits.cpu()
        return time.perf_counter() - started

    latencies: list[float] = []
    rates: list[float] = []
    with torch.no_grad():
        for i in range(warmup):
            one(i)
        sync()
        per_sample = statistics.median(one(i) for i in range(3))
        count = int(min(max(seconds_per_repeat / max(per_sample, 1e-6), 5), 1000))
        for _ in range(repeats):
            sync()
            started = time.perf_counter()
            latencies += [one(i) for i in range(count)]
            sync()
            rates.append(count / (time.perf_counter() - started))
    return {
        "label": "HF BertForQuestionAnswering fp32 b1 @384",
        "what": f"HF transformers {transformers.__version__} BertForQuestionAnswering ({model_name} config, random "
        f"init), float32, batch 1, padded to 384 tokens, attention={attention}",
        "device": device,
        "samples_per_second": statistics.median(rates),
        "samples_per_second_repeats": rates,
        "p90_latency_ms": _p90(latencies) * 1e3,
        "samples_per_repeat": count,
        "repeats": repeats,
        "warmup_samples": warmup,
    }


GPTJ_GENERATE = {"num_beams": 4, "min_new_tokens": 30, "max_new_tokens": 128, "early_stopping": True}
"""The MLCommons GPT-J reference's ``generate`` arguments (greedy beam search: no sampling)."""


def measure_gptj_baseline(
    model_name: str,
    device: str,
    prompts: int = 8,
    seed: int = 0,
    length_scale: float = 1.0,
    cases: tuple[str, ...] = ("forced", "full"),
) -> dict[str, Any]:
    """HF ``GPTJForCausalLM.generate`` as the MLCommons reference runs it: beam 4, batch 1, 30 to 128 new tokens,
    bfloat16 on a GPU (float32 on a CPU), one prompt at a time, the output copied back (which also synchronises).

    Weights: the harness's random weights (``model_name``, ``seed``, drawn as its runs draw them), copied into HF's
    model. Prompts: the first ``prompts`` synthetic prompts of the runs (same seed and ``length_scale``). Cases, as
    the runs' Offline cases: "full", where random weights never choose EOS and every sample generates 128 tokens;
    "forced", where ``max_new_tokens`` is each sample's drawn forced length (the harness's draw), which costs what
    EOS at that length costs. Per case: samples/s over all prompts and their p90 latency, after one short warm-up.
    """
    import time

    import numpy as np
    import torch
    import transformers

    from code.gptj.dataset import GptjSamples
    from code.gptj.model import GptjConfig, hf_config, hf_state, random_weights

    ours = GptjConfig.from_name(model_name)
    config = hf_config(ours, bos_token_id=ours.eos_token_id, eos_token_id=ours.eos_token_id,
                       pad_token_id=ours.pad_token_id)
    cuda = torch.device(device).type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    weights = random_weights(ours, seed, dtype, device, draw_on_device=cuda)
    with torch.device(device):
        model = transformers.GPTJForCausalLM(config)
    model = model.to(dtype).eval()
    loaded = model.load_state_dict(hf_state(weights), strict=False)
    if loaded.missing_keys or loaded.unexpected_keys:
        raise RuntimeError(f"HF GPT-J baseline: weights do not match ({loaded})")
    del weights
    samples = GptjSamples.synthetic(prompts, seed=seed, length_scale=length_scale).with_forced_lengths(seed)
    rows = [torch.as_tensor(np.array(samples.prompt(i), dtype=np.int64), device=device)[None] for i in range(prompts)]

    def one(ids: torch.Tensor, new_tokens: int) -> float:
        started = time.perf_counter()
        output = model.generate(
            ids,
            attention_mask=torch.ones_like(ids),
            do_sample=False,
            **{**GPTJ_GENERATE, "max_new_tokens": new_tokens, "min_new_tokens": min(30, new_tokens)},
        )
        output.cpu()
        return time.perf_counter() - started

    by_case: dict[str, dict[str, Any]] = {}
    with torch.no_grad():
        one(rows[0], 2)  # warm-up: kernels, allocator
        for case in cases:
            lengths = [int(samples.forced_length(i)) if case == "forced" else 128 for i in range(prompts)]
            started = time.perf_counter()
            latencies = [one(ids, n) for ids, n in zip(rows, lengths, strict=True)]
            elapsed = time.perf_counter() - started
            by_case[case] = {
                "samples_per_second": prompts / elapsed,
                "p90_latency_ms": _p90(latencies) * 1e3,
                "mean_new_tokens": float(np.mean(lengths)),
            }
    first = by_case[cases[0]]
    lengths_text = samples.describe_lengths()
    return {
        "label": f"HF GPTJForCausalLM.generate {'bf16' if cuda else 'fp32'} beam 4 b1",
        "what": f"HF transformers {transformers.__version__} GPTJForCausalLM.generate ({model_name} config, the "
        f"harness's random weights, seed {seed}), {'bfloat16' if cuda else 'float32'}, beam 4, batch 1, "
        f"{prompts} synthetic prompts (mean {lengths_text['mean']:.0f} tokens)",
        "device": device,
        "samples_per_second": first["samples_per_second"],
        "p90_latency_ms": first["p90_latency_ms"],
        "by_case": by_case,
        "prompts": prompts,
        "mean_prompt_tokens": lengths_text["mean"],
    }
