"""scripts/gpu/check_split_k_gemm.py's kernel in Triton's CPU interpreter: every split count computes the same GEMM
as float32 arithmetic on the e4m3 operands (its timings run on a GPU)."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from tests.triton_interpreter import fix_interpreter

pytestmark = pytest.mark.skipif(importlib.util.find_spec("triton") is None or torch.cuda.is_available(),
                                reason="the interpreter test needs triton and no GPU")


@pytest.mark.parametrize("splits", [1, 2, 4])
def test_every_split_count_computes_the_gemm(monkeypatch, splits):
    fix_interpreter(monkeypatch)
    from scripts.gpu import check_split_k_gemm as split_k

    g = torch.Generator().manual_seed(0)
    m, n, k = 70, 96, 512  # rows and columns past a tile's edge; K = 4 steps of 128
    xq = (torch.randn(m, k, generator=g) * 20).clamp(-448, 448).to(torch.float8_e4m3fn)
    wq = (torch.randn(n, k, generator=g) * 50).clamp(-448, 448).to(torch.float8_e4m3fn)
    scale = torch.tensor([5e-5])
    bias = (torch.randn(n, generator=g) * 0.1).half()
    want = (xq.float() @ wq.float().t()) * scale + bias.float()
    config = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": splits, "num_warps": 4, "num_stages": 3}
    got = split_k.split_k_gemm(xq, wq, scale, bias, config)
    assert got.dtype == torch.float16 and got.shape == (m, n)
    assert float((got.float() - want).norm() / want.norm()) < 1e-3


def test_a_split_that_does_not_divide_k_is_refused(monkeypatch):
    fix_interpreter(monkeypatch)
    from scripts.gpu import check_split_k_gemm as split_k

    x = torch.zeros(4, 384).to(torch.float8_e4m3fn)
    config = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 128, "SPLIT_K": 2, "num_warps": 4, "num_stages": 3}
    with pytest.raises(ValueError, match="not a multiple of SPLIT_K x BLOCK_K = 256"):
        split_k.split_k_gemm(x, torch.zeros(8, 384).to(torch.float8_e4m3fn), torch.ones(1), torch.zeros(8), config)
    assert all(384 % (c["SPLIT_K"] * 128) == 0 for c in split_k.configs(384))
