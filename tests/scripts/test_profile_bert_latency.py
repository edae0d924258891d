"""The SingleStream latency profile's pure parts: kernel kinds from the names an H200 profile showed, and its inputs."""

import numpy as np
import pytest

from scripts.gpu.profile_bert_latency import features, kind_of


@pytest.mark.parametrize("name,kind", [
    ("nvjet_sm90_qqhsh_64x64_128x13_4x2_h_bz_TNT", "gemm"),
    ("nvjet_sm90_qqhsq_128x96_128x7_1x2_h_bz_gelubias_TNT", "gemm"),
    ("_int8_gemm_kernel", "gemm"),
    ("_varlen_attention_kernel", "attention"),
    ("_add_ln_kernel", "layernorm"),
    ("_embed_ln_kernel", "layernorm"),
    ("void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel>", "quantize/cast"),
    ("Memcpy DtoH (Device -> Pageable)", "quantize/cast"),
])
def test_kernel_kinds(name, kind):
    assert kind_of(name) == kind


def test_a_feature_has_the_asked_tokens_padded_to_384():
    ids, seg, mask = features(171)
    assert ids.shape == seg.shape == mask.shape == (1, 384)
    assert int(mask.sum()) == 171 and np.all(ids[0, 171:] == 0) and np.all(ids[0, :171] >= 1000)
    assert int(seg.sum()) == 171 - 171 // 2
