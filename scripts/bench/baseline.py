"""The baseline every figure is compared with: HF transformers' BERT as the MLCommons reference runs it.

Why: a ratio to a known implementation on the same device says more than a bare figure from a lent machine.
"""

from __future__ import annotations

import math
import statistics
import time
from typing import Any


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
    from code.bert.model import BERT_CONFIGS

    ours = BERT_CONFIGS[model_name]
    config = transformers.BertConfig(
        vocab_size=ours.vocab_size,
        hidden_size=ours.hidden_size,
        num_hidden_layers=ours.num_layers,
        num_attention_heads=ours.num_heads,
        intermediate_size=ours.intermediate_size,
        max_position_embeddings=ours.max_position_embeddings,
        type_vocab_size=ours.type_vocab_size,
        layer_norm_eps=ours.layer_norm_eps,
        attn_implementation=attention,
    )
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
    ordered = sorted(latencies)
    return {
        "what": f"HF transformers {transformers.__version__} BertForQuestionAnswering ({model_name} config, random "
        f"init), float32, batch 1, padded to 384 tokens, attention={attention}",
        "device": device,
        "samples_per_second": statistics.median(rates),
        "samples_per_second_repeats": rates,
        "p90_latency_ms": ordered[min(len(ordered) - 1, math.ceil(0.9 * len(ordered)) - 1)] * 1e3,
        "samples_per_repeat": count,
        "repeats": repeats,
        "warmup_samples": warmup,
    }
