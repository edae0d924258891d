"""GPT-J's rules for a GPU without a class of its own (code/config/any_gpu.py derives the class with them).

- Engines: the H100 SXM class's ladder (FP8 GEMMs and cache, FP8 GEMMs, bf16); resolution skips what the GPU's
  compute capability cannot run (FP8 below 8.9, the in-flight engine below 8.0), and a rung whose engine does not
  fit the GPU's memory with enough samples in flight is left out here, saying why (``gptj_memory_plan``): on an A100
  40 GB GPT-J runs bf16; on a 16 GB GPU nothing fits, and the config says what would.
- Samples in flight (``gpu_batch_size``): the most the memory holds with typical prompts, at most 256 (an H200 ran no
  faster with 320 or 384); SingleStream runs one.
- Rates: the H100's measured rate of the same engine times the model's published gptj-99 ratio where one exists, else
  an estimate: decoding reads the weights and the cache once per step, so its rate follows memory bandwidth, and
  fewer samples in flight than the H100 ran give proportionally fewer samples per step.
"""

from __future__ import annotations

from code.common.constants import Benchmark, Scenario
from code.common.gpu_models import GpuModel, reference
from code.config.any_gpu import Derivation, Factor, own_rates, published_or, rate_notes, scaled, scaled_rung
from code.config.capabilities import missing
from code.config.resolved import NoEngineError, WorkloadSetting
from code.gptj.memory_plan import decode_step_bytes, gptj_memory_plan
from configs.configuration import BenchmarkConfiguration

MOST_USEFUL_SLOTS = 256  # an H200 ran no faster with 320 or 384 samples in flight (documentation/gptj_gpu.md)


def rate_factor(gpu: GpuModel, scenario: Scenario) -> Factor:
    """This GPU's GPT-J rate over the H100 SXM's at the same samples in flight."""
    h100 = reference()
    if gpu.bandwidth_tb_s:
        ratio = gpu.bandwidth_tb_s / h100.bandwidth_tb_s
        estimate = Factor(ratio, f"x {ratio:.3g}, its memory bandwidth over the H100 SXM's")
    else:
        ratio = gpu.power_w / h100.power_w if gpu.power_w else 1.0
        estimate = Factor(ratio, f"x {ratio:.3g}, its power limit over the H100 SXM's (bandwidth unknown)")
    return published_or(gpu, f"gptj-99 {scenario.value}", estimate)


def slot_factor(engine: dict, slots: int) -> float:
    """The rate at ``slots`` samples in flight over the rate at the measured engine's (``gpu_batch_size``), at most 1:
    a decode step reads the weights once and each slot's cache, so samples per second go as slots / (weights + slots
    x cache) (code/gptj/memory_plan.py ``decode_step_bytes``)."""
    weights, per_slot = decode_step_bytes(engine["precision"], engine["kv_cache_dtype"], engine["num_beams"])
    measured = engine["gpu_batch_size"]

    def rate(n: int) -> float:
        return n / (weights + n * per_slot)

    return min(1.0, rate(slots) / rate(measured))


def derive(reference_class: type[BenchmarkConfiguration], gpu: GpuModel, scenario: Scenario,
           workload: WorkloadSetting) -> Derivation:
    factor = rate_factor(gpu, scenario)
    below = reference_class.fields()
    single = scenario is Scenario.SingleStream
    ladder, skipped, skipped_by_capability, slots_of = [], [], [], {}
    for rung in reference_class.engine_ladder:
        engine = {**below, **rung.values}
        cannot = missing(Benchmark.GPTJ, engine, gpu.capability)
        if cannot is not None:  # resolution skips it, saying why; its memory does not matter
            ladder.append(rung)
            skipped_by_capability.append((rung.name, cannot))
            continue
        plan = gptj_memory_plan(gpu.memory_bytes, engine["precision"], engine["kv_cache_dtype"], engine["num_beams"],
                                fp8_available=gpu.has_fp8(), **({"min_slots": 1} if single else {}))
        if not plan.fits:
            skipped.append((rung.name, plan.refusal or "does not fit"))
            continue
        if single:
            ladder.append(scaled_rung(rung, factor.value))
            slots_of[rung.name] = (1, 1.0)
            continue
        slots = min(plan.slots, MOST_USEFUL_SLOTS)
        # fewer samples in flight than measured: fewer per step (a published ratio already holds the GPU's own)
        per_slot = 1.0 if factor.published else slot_factor(engine, slots)
        ladder.append(scaled_rung(rung, factor.value * per_slot, gpu_batch_size=slots))
        slots_of[rung.name] = (slots, per_slot)
    if len(ladder) == len(skipped_by_capability) and skipped:
        reasons = "; ".join(f"{name}: {why}" for name, why in skipped_by_capability + skipped)
        raise NoEngineError(f"GPT-J does not fit {gpu.name} ({gpu.describe()}): {reasons}. bert-99 and bert-99.9 run "
                            "on it", tuple(skipped_by_capability + skipped))
    own = own_rates(reference_class)
    runnable = [rung for rung in ladder if rung.name in slots_of] or ladder
    slots, per_slot = slots_of.get(runnable[-1].name, (1, 1.0))
    values = scaled(own, factor.value * per_slot)
    notes = rate_notes(reference_class, factor)
    if not single:
        values["gpu_batch_size"] = slots
        notes["gpu_batch_size"] = (f"derived: the samples in flight {round(gpu.memory_gib)} GB holds with typical "
                                   f"prompts (code/gptj/memory_plan.py), at most {MOST_USEFUL_SLOTS}")
        if not factor.published:
            notes = {name: note + " and its samples in flight (decode reads the weights once a step)" if name in own
                     else note for name, note in notes.items()}
    return Derivation(tuple(ladder), values, notes, tuple(skipped))
