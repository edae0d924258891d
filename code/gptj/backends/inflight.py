"""The in-flight backend: our GPT-J regrouped for inference, with continuous batching of beam search
(code/gptj/inflight): a paged prompt KV cache shared by each sample's beams, Triton decode attention and a CUDA
graph per step on the GPU.

``gpu_batch_size`` is the number of samples in flight (slots). The C++ core drives ``serve`` (samples join and
complete one by one); ``run_batch`` runs a list of prompts through the same loop.

``precision=fp8`` runs both GEMMs of every layer in FP8 (bf16 elsewhere); ``kv_cache_dtype=fp8`` stores keys and
values in FP8. Both take static scales from a calibration pass over ``CALIBRATION_PROMPTS`` synthetic prompts
with CNN/DailyMail-like lengths, drawn with their own seed so they are never the run's samples.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from code.common.faults import reading
from code.gptj.backends import BackendOptions
from code.gptj.backends.pytorch import DTYPES, REDOWNLOAD
from code.gptj.generation import GenerationConfig
from code.gptj.inflight.engine import EngineOptions, ForcedLengthOf, InflightEngine
from code.gptj.inflight.layers import Amax, InflightModel
from code.gptj.model import GptjConfig, load_checkpoint, random_weights
from code.numerics.fp8 import E4M3

PRECISIONS = (*DTYPES, "fp8")
KV_CACHE_DTYPES = ("auto", "fp8")
FP8_CAPABILITY = (8, 9)  # e4m3 tensor-core GEMMs
CALIBRATION_PROMPTS = 32
CALIBRATION_SEED_OFFSET = 7919  # calibration prompts use seed + this, never the run's own samples


class InflightGptjBackend:
    def __init__(self, options: BackendOptions) -> None:
        if options.precision not in PRECISIONS:
            raise ValueError(f"the inflight GPT-J backend runs in {', '.join(PRECISIONS)}, not "
                             f"{options.precision!r}")
        if options.kv_cache_dtype not in KV_CACHE_DTYPES:
            raise ValueError(f"kv_cache_dtype must be one of {', '.join(KV_CACHE_DTYPES)}, not "
                             f"{options.kv_cache_dtype!r}")
        device = torch.device(options.device)
        fp8 = options.precision == "fp8" or options.kv_cache_dtype == "fp8"
        if device.type == "cuda" and options.precision == "fp32":
            raise ValueError("the inflight backend on CUDA runs bf16, fp16 or fp8 (FlashAttention has no float32): "
                             "set --precision=bf16")
        if fp8 and (device.type != "cuda" or torch.cuda.get_device_capability(device) < FP8_CAPABILITY):
            raise ValueError("FP8 GEMMs and the FP8 KV cache need an NVIDIA GPU of compute capability 8.9 or newer "
                             "(Ada, Hopper): set --precision=bf16 (fp32 on a CPU) --kv_cache_dtype=auto")
        if device.type == "cpu" and options.cpu_threads:
            torch.set_num_threads(options.cpu_threads)  # why not torch's default: code/common/devices.py
        dtype = torch.bfloat16 if options.precision == "fp8" else DTYPES[options.precision]
        if options.checkpoint == "random":
            model = random_weights(GptjConfig.from_name(options.model_name), options.seed, dtype, device,
                                   draw_on_device=device.type == "cuda")
        else:
            with reading(options.checkpoint, REDOWNLOAD):
                model = load_checkpoint(options.checkpoint, dtype=dtype, device=device)
        generation = GenerationConfig(num_beams=options.num_beams)
        longest = min(options.max_prompt_length, model.config.n_positions - generation.max_new_tokens + 1)
        inflight = InflightModel.from_model(model, consume=True)
        del model
        amax = calibrate(inflight, options.seed, longest) if fp8 else None
        if options.precision == "fp8":
            inflight.use_fp8_gemms(amax)
        if fp8:
            torch.cuda.empty_cache()  # the KV pool is sized from free memory: return the calibration's blocks
        engine_options = EngineOptions(slots=options.max_batch_size, max_prompt_length=longest,
                                       cuda_graphs=options.cuda_graphs,
                                       kv_dtype=E4M3 if options.kv_cache_dtype == "fp8" else None)
        self.engine = InflightEngine(inflight, generation, engine_options, kv_amax=amax)

    def run_batch(self, sample_indices: np.ndarray, prompts: list[np.ndarray]) -> list[np.ndarray]:
        return self.engine.generate(prompts)

    def serve(self, session, prompt_of: Callable[[int], np.ndarray],  # noqa: ANN001 - the core's Session
              forced_length_of: ForcedLengthOf | None = None) -> None:
        """Run the whole LoadGen test: take samples from the C++ core's session, complete each when done."""
        self.engine.serve(session.take, session.complete, prompt_of, forced_length_of)


def calibrate(model: InflightModel, seed: int, max_prompt_length: int) -> Amax:
    """GEMM-input, key and value magnitudes over synthetic calibration prompts (16-bit forward)."""
    from code.gptj.dataset import GptjSamples

    samples = GptjSamples.synthetic(CALIBRATION_PROMPTS, seed=seed + CALIBRATION_SEED_OFFSET,
                                    max_length=max_prompt_length)
    return calibrate_on(model, [samples.prompt(i) for i in range(len(samples))])


def calibrate_on(model: InflightModel, prompts: list[np.ndarray], batch: int = 8) -> Amax:
    """GEMM-input, key and value magnitudes over ``prompts`` (16-bit forward, ``batch`` prompts per pass)."""
    amax = Amax()
    for start in range(0, len(prompts), batch):
        tensors = [torch.as_tensor(np.asarray(p, dtype=np.int64), device=model.device)
                   for p in prompts[start: start + batch]]
        model.collect_amax(tensors, amax)
    return amax
