"""Weights of our PyTorch LLMs (GPT-J's, Llama's): HF checkpoint files read one tensor at a time, models built
without paying for an init, and seeded random weights that are the same on every machine.

Each model keeps its own table of HF names -> its parameters; what is read here is name/tensor pairs.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import TypeVar

import torch
from torch import Tensor, nn

from code.common.faults import CheckpointError

Module = TypeVar("Module", bound=nn.Module)

_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
_SINGLE_FILES = ("model.safetensors", "pytorch_model.bin")
_TORCH_SUFFIXES = (".bin", ".pt", ".pth", ".pytorch")


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
