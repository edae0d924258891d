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


def test_jitter_times_every_sample_in_three_phases():
    """The jitter phases' logic with a stand-in backend whose samples take 2 ms (on the CPU the readers read the
    host alone): each phase runs samples of one feature each for its seconds and reports their percentiles."""
    import time

    from scripts.gpu.profile_bert_latency import jitter

    class TwoMs:
        shapes: list[tuple[int, int]] = []

        def run_batch(self, idx, ids, seg, mask):
            self.shapes.append(ids.shape)
            time.sleep(0.002)

    backend = TwoMs()
    phases = jitter(backend, 0.5)
    assert list(phases) == ["none", "readers", "none_again"]
    for r in phases.values():
        assert 50 < r["samples"] < 260
        assert 2.0 <= r["p50"] <= r["p90"] <= r["p99"] < 50
        assert len(r["median_per_second"]) == 1 and r["median_per_second"][0] >= 2.0
    assert set(backend.shapes) == {(1, 384)}
