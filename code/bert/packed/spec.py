"""The packed path's engine spec: which kernels an engine runs, the switches that choose them, and their rules.

``KERNEL_SWITCHES`` declares each switch of the packed path (name, type, default, help) to the configuration, as
switches of the pytorch backend (``code/bert/backends/__init__.py``); ``kernel_rules`` states the rules between them
and the precision. ``PackedKernels`` is the spec an engine runs with: built once from a resolved config
(``from_values``), checked once when made (the switches' values and ``kernel_rules``), then passed whole to
``PackedRunner`` and ``PackedBert``, which read it and check nothing again. The configuration applies the same
``kernel_rules`` to a resolved config, naming where each value came from, before anything loads: one set of rules.

Adding a switch of the packed path: its ``Field`` in ``KERNEL_SWITCHES`` and its attribute on ``PackedKernels``
(with its rule in ``kernel_rules``, if it has one), here; the kernel that reads it (``packed_model.py``); and the
regenerated ``documentation/configs.md``. Torch-free: the configuration imports it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from code.config.backends import Origin
from code.config.field_spec import Field
from code.numerics.switches import FP8_FAST_ACCUM, fast_accum_needs_fp8

GEMM_INPUTS = ("qkv", "wo", "w1", "w2")  # the GEMMs of a layer, each of which may run in 8 bits
ALL_FP8_GEMMS = "+".join(GEMM_INPUTS)
QUANTIZED = ("fp8", "int8")  # the precisions with 8-bit GEMMs: calibrated engines, run on the packed GPU path only
PACKED_PRECISIONS = ("fp16", "bf16", *QUANTIZED)  # the precisions the packed path runs

KERNEL_SWITCHES: tuple[Field, ...] = (
    FP8_FAST_ACCUM,
    Field("fp8_gemms", str, ALL_FP8_GEMMS, "BERT packed path, fp8 or int8: which GEMMs of every layer run in 8 bits "
          "(FP8 or INT8, as the precision says), '+'-joined from qkv, wo, w1, w2 (the others stay 16-bit)",
          pattern=r"(qkv|wo|w1|w2)(\+(qkv|wo|w1|w2))*", engine=True),
    Field("attention_kernel", str, "triton", "BERT packed path: varlen attention kernel (triton: ours, "
          "code/bert/packed/attention.py, which also adds the QKV bias; flash: torch's FlashAttention-2)",
          choices=("triton", "flash"), engine=True),
    Field("gelu_in_gemm", bool, False, "BERT packed path: bias + GELU in the first FFN GEMM's epilogue (cuBLASLt's, "
          "or the INT8 GEMM's: tanh form; an 8-bit w1 also writes w2's 8-bit input); off: a separate erf-GELU "
          "kernel, the reference's form (the 99.9% target needs it)", engine=True),
    Field("fp8_residual", bool, False, "BERT packed path, fp8 with every GEMM in FP8: the residual stream between "
          "LayerNorms kept only as the next GEMM's e4m3 input (an 8-bit residual read and output write, as "
          "TensorRT's 8-bit skip-LayerNorm); off: a 16-bit residual", engine=True),
    Field("fp8_attention", bool, False, "BERT packed path, fp8 with qkv in FP8: the QKV GEMM writes e4m3 q, k, v "
          "(bias added, calibrated scale) and attention runs q.k on FP8 tensor cores, as NVIDIA's FP8 encoder; off: "
          "16-bit q, k, v", engine=True),
)
_DEFAULT = {switch.name: switch.default for switch in KERNEL_SWITCHES}


def kernel_rules(values: Mapping[str, Any], origin: Origin) -> str | None:
    """The first rule between the packed path's switches and the precision that ``values`` break (None: none):
    each FP8-only switch keeps e4m3 tensors or FP8 accumulators that only an FP8 engine has, so another engine would
    run without it while its label says otherwise."""
    problem = fast_accum_needs_fp8(values, origin)
    if problem:
        return problem
    precision = values.get("precision")
    gemms = values.get("fp8_gemms", ALL_FP8_GEMMS)
    for name in ("fp8_residual", "fp8_attention"):
        if values.get(name) and precision == "int8":
            return (f"{origin(name)} = True keeps e4m3 tensors for FP8 kernels, and {origin('precision')} = 'int8' "
                    f"runs INT8 GEMMs, which have no FP8 form: leave {name} out with int8, or set --precision=fp8 on "
                    "a GPU that has FP8")
    if values.get("fp8_residual") and (precision != "fp8" or set(gemms.split("+")) != set(GEMM_INPUTS)):
        return (f"{origin('fp8_residual')} = True keeps the residual only as the next GEMM's FP8 input, so every GEMM "
                f"must run in FP8: add --precision=fp8 and --fp8_gemms={ALL_FP8_GEMMS} (now {precision!r}, "
                f"{gemms!r}), or leave fp8_residual out")
    attention = values.get("attention_kernel", "triton")
    if values.get("fp8_attention") and (precision != "fp8" or "qkv" not in gemms.split("+") or attention != "triton"):
        return (f"{origin('fp8_attention')} = True has the FP8 QKV GEMM write e4m3 for the triton attention kernel: "
                f"add --precision=fp8, qkv in --fp8_gemms and --attention_kernel=triton (now {precision!r}, "
                f"{gemms!r}, {attention!r}), or leave fp8_attention out")
    return None


@dataclass(frozen=True)
class PackedKernels:
    """Which kernels an engine of the packed path runs (code/bert/packed, documentation/bert_gpu.md). Every instance
    passed the switches' own checks and ``kernel_rules``, so what reads it need not check it again."""

    precision: str = "fp16"  # the engine's: fp8 and int8 run 8-bit GEMMs in that format, fp16 and bf16 16-bit ones
    fp8_fast_accum: bool = _DEFAULT["fp8_fast_accum"]  # FP8 GEMMs: cuBLASLt fast accumulation (faster, less exact)
    fp8_gemms: str = _DEFAULT["fp8_gemms"]  # fp8/int8 engines: the GEMMs of each layer that run in 8 bits
    attention_kernel: str = _DEFAULT["attention_kernel"]  # "triton" (attention.py) | "flash" (torch FA2 varlen)
    gelu_in_gemm: bool = _DEFAULT["gelu_in_gemm"]  # bias + tanh GELU in w1's GEMM epilogue (off: erf-GELU kernel)
    fp8_residual: bool = _DEFAULT["fp8_residual"]  # fp8, every GEMM in FP8: the residual stream kept as e4m3
    fp8_attention: bool = _DEFAULT["fp8_attention"]  # fp8, qkv in FP8: e4m3 q, k, v and an FP8 q.k dot

    def __post_init__(self) -> None:
        if self.precision not in PACKED_PRECISIONS:
            raise ValueError(f"the packed path runs {', '.join(PACKED_PRECISIONS)} engines, not {self.precision!r}")
        values = dataclasses.asdict(self)
        for switch in KERNEL_SWITCHES:
            switch.check(values[switch.name], "PackedKernels")
        problem = kernel_rules(values, lambda name: name)
        if problem:
            raise ValueError(problem)

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> PackedKernels:
        """The spec a resolved config (or any mapping of field values) names."""
        return cls(**{spec_field.name: values[spec_field.name] for spec_field in dataclasses.fields(cls)})

    @property
    def eight_bit(self) -> str | None:
        """The format of the 8-bit GEMMs (``fp8``, ``int8``); None for a 16-bit engine."""
        return self.precision if self.precision in QUANTIZED else None

    @property
    def gemms(self) -> frozenset[str]:
        """The GEMMs of every layer that run in 8 bits (an 8-bit engine's; a 16-bit engine runs none)."""
        return frozenset(self.fp8_gemms.split("+")) if self.eight_bit else frozenset()
