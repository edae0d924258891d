"""Both LLMs' checkpoint loading finds (or refuses) the checkpoint's files before any weight is allocated: an 8B
model's storage costs memory and time a wrong path must not."""

from __future__ import annotations

from types import ModuleType

import pytest

import code.gptj.model as gptj_model
import code.llama31.model as llama_model
from code.common.faults import CheckpointError
from code.gptj.model import GPTJ_CONFIGS
from code.llama31.architecture import LLAMA_CONFIGS


@pytest.mark.parametrize("module,config", [(gptj_model, GPTJ_CONFIGS["tiny"]), (llama_model, LLAMA_CONFIGS["tiny"])],
                         ids=["gptj", "llama3.1-8b"])
def test_a_wrong_checkpoint_path_fails_before_the_model_is_built(tmp_path, monkeypatch, module: ModuleType,
                                                                  config: object) -> None:
    def no_model(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202 - a trap
        raise AssertionError("the model was built before the checkpoint's files were found")

    monkeypatch.setattr(module, "empty_model", no_model)
    with pytest.raises(CheckpointError, match="no such checkpoint file"):
        module.load_checkpoint(tmp_path / "absent.safetensors", config)
