"""Weights of our PyTorch LLMs (GPT-J's, Llama's): HF checkpoint files read one tensor at a time, models built
without paying for an init, and seeded random weights that are the same on every machine.

Each model keeps its own table of HF names -> its parameters (``HfNames``); ``load_named`` copies a checkpoint's
name/tensor pairs into a model by that table.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import Tensor, nn

from code.common.faults import CheckpointError, reading

Module = TypeVar("Module", bound=nn.Module)
# HF tensor name -> (our parameter, part): part i is the i-th row block of a fused parameter (q, k, v of wqkv) that
# one HF tensor fills; None the whole parameter.
HfNames = Mapping[str, tuple[str, int | None]]

# A precision's dtype for the model's weights; fp8 runs bf16 between its FP8 GEMMs (``model_dtype``).
DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}

RANDOM = "random"  # a backend's checkpoint option for seeded random weights of its model_name's architecture
_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")
_TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".pytorch")


def layered_names(top_level: HfNames, layer_prefix: str, in_layer: HfNames, n_layers: int) -> dict[str, tuple[str,
                                                                                                       int | None]]:
    """``HfNames`` of a model of ``n_layers`` alike blocks: ``top_level`` as it is, and each block's ``in_layer``
    names under HF's ``{layer_prefix}{i}.`` and ours under ``layers.{i}.`` (both models name their blocks so)."""
    names = dict(top_level)
    for layer in range(n_layers):
        names |= {f"{layer_prefix}{layer}.{hf}": (f"layers.{layer}.{ours}", part) for hf, (ours, part) in
                  in_layer.items()}
    return names


def model_dtype(precision: str) -> torch.dtype:
    """The dtype a model loads in: an FP8 model keeps bf16 outside its FP8 GEMMs (and calibrates in it)."""
    return torch.bfloat16 if precision == "fp8" else DTYPES[precision]


def checkpoint_files(path: Path) -> list[Path]:
    """The weight files of a checkpoint: a file itself, or a folder's shards (by index) or single file, safetensors
    preferred when a folder has both."""
    if not path.is_dir():
        if path.suffix != ".safetensors" and path.suffix not in _TORCH_SUFFIXES:
            raise CheckpointError(
                f"{path}: unknown checkpoint format {path.suffix!r} (a folder, .safetensors, or "
                f"{'/'.join(_TORCH_SUFFIXES)})"
            )
        if not path.is_file():
            raise CheckpointError(f"{path}: no such checkpoint file")
        return [path]
    for index in _INDEXES:
        if (path / index).is_file():
            weight_map = json.loads((path / index).read_text()).get("weight_map")
            if not isinstance(weight_map, dict):
                raise CheckpointError(f"{path / index} has no weight_map: not a checkpoint index")
            files = [path / f for f in sorted(set(weight_map.values()))]
            if absent := [str(f) for f in files if not f.is_file()]:
                raise CheckpointError(f"{path / index} names shards that are not there: {', '.join(absent)}")
            return files
    for single in _SINGLE_FILES:
        if (path / single).is_file():
            return [path / single]
    raise CheckpointError(
        f"{path}: no checkpoint (looked for a file, or a folder with one of {', '.join(_INDEXES + _SINGLE_FILES)})"
    )


def read_tensors(files: list[Path]) -> Iterator[tuple[str, Tensor]]:
    for file in files:
        if file.suffix == ".safetensors":
            from safetensors import safe_open

            with safe_open(str(file), framework="pt", device="cpu") as f:
                for name in f.keys():
                    yield name, f.get_tensor(name)
            continue
        # weights_only: a checkpoint is data, never code. mmap: page in one tensor at a time (zip format only).
        try:
            state = torch.load(file, map_location="cpu", weights_only=True, mmap=True)
        except RuntimeError:
            state = torch.load(file, map_location="cpu", weights_only=True)
        if isinstance(state, Mapping) and isinstance(state.get("state_dict"), Mapping):
            state = state["state_dict"]
        if not isinstance(state, Mapping):
            raise CheckpointError(f"{file}: expected a state dict, found {type(state).__name__}")
        yield from state.items()
        del state


def empty_module(build: Callable[[], Module], dtype: torch.dtype, device: torch.device | str) -> Module:
    """``build()`` with uninitialised storage in ``dtype`` on ``device``: built on the meta device, so no init is
    paid (an 8B model's init would take minutes on a CPU)."""
    with torch.device("meta"):
        model = build().to(dtype)
    return model.to_empty(device=device)


def checkpoint_tensors(path: Path) -> Iterator[tuple[str, Tensor]]:
    """A checkpoint's (name, tensor) pairs, one at a time; its files are found, or refused, now rather than at the
    first read, so that a wrong path fails before a model is built."""
    return read_tensors(checkpoint_files(path))


def random_module(build: Callable[[], Module], seed: int, dtype: torch.dtype, device: torch.device | str,
                  draw_on_device: bool = False) -> Module:
    """``build()`` in eval mode with HF's seeded init (``init_weights``) in ``dtype`` on ``device``: drawn on the
    CPU, the same on every machine; with ``draw_on_device`` drawn on ``device`` (seconds instead of minutes for
    billions of draws, the values then depending on its generator: for speed runs)."""
    model = empty_module(build, dtype, device)
    return init_weights(model, seed, torch.device(device) if draw_on_device else torch.device("cpu")).eval()


def init_weights(model: Module, seed: int, draw_device: torch.device) -> Module:
    """HF's init, depending only on (architecture, seed): N(0, 0.02) matrices and embeddings, zero biases, ones for
    the norms' weights (the only 1-D weights), drawn in float32 on ``draw_device`` from a private generator, one
    tensor at a time in parameter order, then cast and copied in place: the global RNG untouched.

    On the CPU the values are the same on every machine; on a GPU (seconds instead of minutes for billions of
    draws) they depend on the device's generator: for speed measurements, where the values do not matter."""
    generator = torch.Generator(device=draw_device).manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith("bias"):
                param.zero_()
            elif param.dim() == 1:
                param.fill_(1.0)
            else:
                param.copy_(torch.empty(param.shape, device=draw_device).normal_(0.0, 0.02, generator=generator))
    return model


def read_config(path: Path) -> dict:
    """A checkpoint folder's ``config.json`` (refused with the reason when absent)."""
    if not (path / "config.json").is_file():
        raise CheckpointError(f"{path}: no config.json beside the weights (a checkpoint folder holds one)")
    return json.loads((path / "config.json").read_text())


def load_named(model: Module, hf_names: HfNames, part_of: Callable[[Tensor, int | None], Tensor],
               tensors: Mapping[str, Tensor] | Iterable[tuple[str, Tensor]], ignored: re.Pattern[str],
               mismatch: str) -> Module:
    """Copy a checkpoint's tensors into ``model`` (converting dtype and device) and return it in eval mode.

    A tensor is named as HF names it (``hf_names``) or as we do (a state dict of ours); ``ignored`` names buffers
    older checkpoints carry. Every parameter must be filled (a tensor given under both names is copied twice, the
    later copy kept), or ``CheckpointError`` lists at once all missing, unexpected and wrongly shaped or typed
    tensors under the line ``mismatch``: one run says all that is wrong with a download. Takes an iterator, so a
    checkpoint of many GB streams through one tensor at a time.
    """
    params = dict(model.named_parameters())
    targets: dict[str, tuple[str, int | None]] = {ours: (ours, None) for ours in params} | dict(hf_names)
    parts: dict[str, set[int | None]] = {}
    for ours, part in hf_names.values():
        parts.setdefault(ours, set()).add(part)
    filled: dict[str, set[int | None]] = {ours: set() for ours in params}
    unexpected: list[str] = []
    wrong: list[str] = []
    with torch.no_grad():
        for name, tensor in tensors.items() if isinstance(tensors, Mapping) else tensors:
            if ignored.fullmatch(name):
                continue
            if name not in targets:
                unexpected.append(name)
                continue
            ours, part = targets[name]
            dst = part_of(params[ours], part)
            # A refused tensor is listed once, by why it was refused, not also as missing.
            filled[ours] |= parts.get(ours, {None}) if part is None else {part}
            if tuple(tensor.shape) != tuple(dst.shape):
                wrong.append(f"wrong shape: {name}: checkpoint {tuple(tensor.shape)}, model {tuple(dst.shape)}")
            elif not tensor.is_floating_point():  # copy_ would cast it silently: a quantized or foreign file
                wrong.append(f"wrong dtype: {name}: checkpoint {tensor.dtype}, model {dst.dtype}")
            else:
                dst.copy_(tensor)
    missing = [hf for hf, (ours, part) in hf_names.items() if part not in filled[ours]]
    missing += [ours for ours in params if ours not in parts and not filled[ours]]
    if missing or unexpected or wrong:
        lines = [mismatch] + [f"  missing: {k}" for k in missing] + [f"  unexpected: {k}" for k in unexpected]
        raise CheckpointError("\n".join(lines + [f"  {w}" for w in wrong]))
    return model.eval()


@dataclass(frozen=True)
class WeightsSource:
    """Where an LLM's weights come from, for every backend of its benchmark (the pytorch one, the in-flight engine and
    its calibration): its architectures by name, its seeded random weights, its checkpoint loader, and the fix a
    damaged checkpoint's error names."""

    config_of: Callable[[str], Any]  # an architecture's name -> its config
    random_weights: Callable[..., Any]  # (config, seed, dtype, device, draw_on_device=) -> model
    load_checkpoint: Callable[..., Any]  # (path, dtype=, device=) -> model
    redownload: str  # e.g. 're-download it: make download_model BENCHMARKS="gptj"'

    def load(self, checkpoint: str, model_name: str, seed: int, dtype: torch.dtype, device: torch.device,
             draw_on_device: bool = False) -> Any:  # noqa: ANN401 - the benchmark's model
        """``checkpoint``'s weights (a checkpoint brings its own architecture), or with ``RANDOM`` seeded random ones
        of ``model_name``'s; ``draw_on_device``: drawn on the GPU (seconds instead of minutes, values then depend
        on its generator: for speed runs)."""
        if checkpoint == RANDOM:
            return self.random_weights(self.config_of(model_name), seed, dtype, device, draw_on_device=draw_on_device)
        with reading(checkpoint, self.redownload):
            return self.load_checkpoint(checkpoint, dtype=dtype, device=device)

    def for_engine(self, spec: Any, device: torch.device, dtype: torch.dtype) -> Any:  # noqa: ANN401 - spec and model
        """An engine spec's model (its checkpoint, model_name and seed) as the in-flight backends load it: random
        weights drawn on the GPU there, since the in-flight engine runs for speed."""
        return self.load(spec.checkpoint, spec.model_name, spec.seed, dtype, device,
                         draw_on_device=device.type == "cuda")
