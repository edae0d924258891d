"""The in-flight engine (code/gptj/inflight) against the reference beam search (code/llm/generation.py, itself
checked against transformers in tests/gptj/test_model.py): the same tokens for every prompt in float32, whatever the
number of slots, the page size, the prefill pass size or a KV pool too small for all slots at once."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from code.gptj.dataset import GptjSamples
from code.gptj.inflight.layers import InflightModel
from code.gptj.model import GPTJ_CONFIGS, random_weights
from code.llm.beam_search import BeamState
from code.llm.generation import GenerationConfig, cache_shape, generate
from code.llm.inflight_engine import EngineOptions, InflightEngine
from code.llm.kv_cache import CacheShape, KVCache
from code.llm.paged_attention import decode_attention_reference

TINY = GPTJ_CONFIGS["tiny"]
EOS = 50256
# Lengths: a single token, a page boundary (16) and past it, more prompts than slots so slots are reused.
LENGTHS = [7, 1, 40, 16, 17, 25, 12, 9, 70, 5, 33]


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def model():
    """Weights of std 0.05 and EOS favoured a little, so beams end at different lengths (see test_gptj_model)."""
    model = random_weights(TINY, 0)
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.empty(p.shape).normal_(0.0, 0.05, generator=generator))
            if "norm" in name and name.endswith("weight"):
                p.add_(1.0)
        model.output.bias[EOS] += 1.0
    return model


@pytest.fixture(scope="module")
def prompts():
    rng = np.random.default_rng(1)
    return [rng.integers(0, EOS, size=n).astype(np.int32) for n in LENGTHS]


@pytest.fixture(scope="module")
def expected(model, prompts):
    config = GenerationConfig()
    model.setup_caches(*cache_shape(LENGTHS, config))
    return generate(model, prompts, config)


@pytest.mark.parametrize(("slots", "page_size", "prefill_tokens", "kv_pages"), [
    (3, 16, 50, 0),   # slots reused, prompts over several pages, prefill split into passes
    (16, 64, 4096, 0),  # every prompt at once
    (4, 8, 40, 9),    # a pool of 9 pages (one 70-token prompt): admission waits for pages to free
])
def test_engine_matches_reference_beam_search(model, prompts, expected, slots, page_size, prefill_tokens,
                                              kv_pages):
    options = EngineOptions(slots=slots, max_prompt_length=72, page_size=page_size, prefill_tokens=prefill_tokens,
                            kv_pages=kv_pages)
    engine = InflightEngine(InflightModel.from_model(model), GenerationConfig(), options)
    got = engine.generate(prompts)
    for g, e in zip(got, expected, strict=True):
        assert g.dtype == np.int32
        np.testing.assert_array_equal(g, e)
    lengths = sorted(len(g) for g in got)
    # beams ended at many different steps (EOS after min_new_tokens), so slots freed and refilled at many steps
    assert lengths[0] >= 31 and len(set(lengths)) >= 8, lengths
    stats = engine.stats.as_dict()
    assert stats["completed"] == len(prompts) and stats["generated_tokens"] == sum(lengths)
    assert stats["mean_running_slots"] <= slots


def test_decode_attention_reads_prompt_pages_and_beam_ancestry():
    """Against attention written out by hand: beam b reads the shared prompt, then token t from row ancestry[b, t]."""
    torch.manual_seed(0)
    shape = CacheShape(layers=1, heads=2, head_dim=8, slots=2, beams=4, max_new_tokens=5, page_size=4, pages=6,
                       max_prompt_length=10)
    cache = KVCache(shape, torch.float32, torch.device("cpu"))
    for t in (cache.prompt_k, cache.prompt_v, cache.gen_k, cache.gen_v):
        t.normal_()
    cache.assign(1, 10)  # slot 1 takes pages 0-2 first, slot 0 the next: tables are not the identity
    cache.assign(0, 3)
    cache.set_tables([0, 1], [3, 10])
    ancestry = torch.randint(0, 4, (2, 4, 5), dtype=torch.int32)
    counts = torch.tensor([2, 5])
    q = torch.randn(8, 2, 8)
    out = decode_attention_reference(q, cache, 0, ancestry, counts)
    pages = {0: [3], 1: [0, 1, 2]}
    for slot, n in ((0, 3), (1, 10)):
        prompt_k = cache.prompt_k[0, pages[slot]].reshape(-1, 2, 8)[:n]
        prompt_v = cache.prompt_v[0, pages[slot]].reshape(-1, 2, 8)[:n]
        for beam in range(4):
            gen = [(int(ancestry[slot, beam, t]), t) for t in range(int(counts[slot]))]
            k = torch.cat([prompt_k, torch.stack([cache.gen_k[0, slot, r, t] for r, t in gen])])
            v = torch.cat([prompt_v, torch.stack([cache.gen_v[0, slot, r, t] for r, t in gen])])
            for head in range(2):
                weights = torch.softmax(k[:, head] @ q[slot * 4 + beam, head] / 8**0.5, dim=0)
                torch.testing.assert_close(out[slot * 4 + beam, head], weights @ v[:, head])


def test_engine_refuses_what_it_does_not_implement(model):
    with pytest.raises(ValueError, match="early_stopping=True"):
        BeamState(2, GenerationConfig(early_stopping=False), torch.device("cpu"))
    with pytest.raises(ValueError, match="exceed the model's 2048 positions"):
        InflightEngine(InflightModel.from_model(model), GenerationConfig(), EngineOptions(2, max_prompt_length=2000))
    with pytest.raises(ValueError, match="cannot hold one"):
        InflightEngine(InflightModel.from_model(model), GenerationConfig(),
                       EngineOptions(2, max_prompt_length=72, page_size=8, kv_pages=3))
    engine = InflightEngine(InflightModel.from_model(model), GenerationConfig(), EngineOptions(2, max_prompt_length=8))
    with pytest.raises(ValueError, match="9-token prompt; the engine was built for at most 8"):
        engine.generate([np.arange(9, dtype=np.int32)])


def test_decode_steps_count_what_beam_search_ran_past_the_returned_answer(model, prompts, expected):
    """A sample's decode steps are the steps its slot ran; with beam search's own end the best finished beam can be
    shorter than the search that found it (here 953 steps for 939 returned tokens), with a forced length they are
    equal. The bench reports both per sample."""
    engine = InflightEngine(InflightModel.from_model(model), GenerationConfig(),
                            EngineOptions(slots=3, max_prompt_length=72, page_size=16))
    engine.generate(prompts)
    natural = engine.stats.as_dict()
    assert natural["completed"] == len(prompts) and natural["generated_tokens"] == sum(len(e) for e in expected)
    assert natural["decode_steps"] > natural["generated_tokens"]
    engine.stats = type(engine.stats)(kv_pages=engine.stats.kv_pages)
    forced = [31, 40, 128, 50, 60, 60, 33, 31, 100, 45, 45]
    engine.generate(prompts, forced_lengths=forced)
    assert engine.stats.as_dict()["decode_steps"] == engine.stats.generated_tokens == sum(forced)


def test_beam_search_leaves_first_tokens_to_the_responses(model, prompts):
    """Beam search knows its first token only when the search ends: the engine reports none early (the core sends
    each with its response) and answers as without the callback."""
    engine = InflightEngine(InflightModel.from_model(model), GenerationConfig(),
                            EngineOptions(slots=3, max_prompt_length=72, page_size=16))
    chosen = prompts[:4]
    reported: list[int] = []
    done: dict[int, list[int]] = {}
    queue = list(range(len(chosen)))

    def take(limit: int, _timeout: float) -> tuple[np.ndarray, np.ndarray] | None:
        if not queue:
            return None
        picked = [queue.pop(0) for _ in range(min(limit, len(queue)))]
        return np.array(picked, dtype=np.uint64), np.array(picked, dtype=np.int64)

    def complete(ids: np.ndarray, outputs: list[np.ndarray]) -> None:
        done.update((int(i), out.tolist()) for i, out in zip(ids, outputs, strict=True))

    engine.serve(take, complete, lambda index: chosen[index], None, lambda ids, _tokens: reported.extend(ids))
    assert reported == []
    want = engine.generate(chosen)
    assert [done[i] for i in range(len(chosen))] == [w.tolist() for w in want]


def test_prompt_pass_warm_up_leaves_the_engine_as_built(model, prompts, expected):
    """The warm-up pass a GPU engine runs when built (a short prompt, discarded) hands its pages back in the pool's
    order and touches no slot state or statistics; the engine then matches the reference."""
    engine = InflightEngine(InflightModel.from_model(model), GenerationConfig(),
                            EngineOptions(slots=3, max_prompt_length=72, page_size=8, prefill_tokens=50))
    cache = engine.cache
    beams = engine.beams
    before = (list(cache._free_pages), cache.block_table.clone(), cache.prompt_lengths.clone(),
              dataclasses.replace(engine.stats), beams.step_no.clone(), beams.finished.clone())
    engine._warm_prefill()  # CPU engines skip it when built; it must hold on any device
    assert cache._free_pages == before[0] and not cache._slot_pages
    assert torch.equal(cache.block_table, before[1]) and torch.equal(cache.prompt_lengths, before[2])
    assert engine.stats == before[3] and engine.stats.prefill_passes == 0
    assert torch.equal(beams.step_no, before[4]) and torch.equal(beams.finished, before[5])
    assert cache.prompt_k[:, before[0][-2:]].float().abs().sum() > 0  # it did write two pages (9 tokens of 8)
    for g, e in zip(engine.generate(prompts), expected, strict=True):
        np.testing.assert_array_equal(g, e)


def test_forced_lengths_end_with_eos_exactly_where_asked(model, prompts, expected):
    """Synthetic runs force each output's length, EOS included, shorter or longer than the model would stop (EOS
    is no choice before it); samples given no length (0) still match the reference, in slots that forced samples
    used before and after them."""
    natural = [len(e) for e in expected]
    forced = [31, 0, 128, 0, natural[4] + 7, 60, 0, 31, 100, 0, 45]
    engine = InflightEngine(InflightModel.from_model(model), GenerationConfig(),
                            EngineOptions(slots=3, max_prompt_length=72, page_size=16))
    got = engine.generate(prompts, forced_lengths=forced)
    for g, e, n in zip(got, expected, forced, strict=True):
        if n:
            assert len(g) == n and g[-1] == EOS and EOS not in g[:-1].tolist()
        else:
            np.testing.assert_array_equal(g, e)


def test_forced_lengths_are_drawn_reproducibly_within_the_reference_bounds():
    samples = GptjSamples.synthetic(4000, seed=3, length_scale=0.05)
    a, b = samples.with_forced_lengths(5).forced_lengths, samples.with_forced_lengths(5).forced_lengths
    np.testing.assert_array_equal(a, b)
    assert a.min() >= 31 and a.max() <= 128 and 66 < a.mean() < 74  # clipped LogNormal(66, 0.35): mean ~70
    assert samples.forced_length(0) == 0 and samples.with_forced_lengths(5).forced_length(7) == a[7]
    real = GptjSamples(samples.input_ids, samples.lengths, False)
    with pytest.raises(ValueError, match="--synthetic_output_lengths=model"):
        real.with_forced_lengths()


def test_fp8_kv_cache_stores_scaled_e4m3_and_attention_reads_it_back():
    """An FP8 cache holds x / scale in e4m3; attention over it equals attention over the dequantized values."""
    torch.manual_seed(0)
    shape = CacheShape(layers=2, heads=2, head_dim=8, slots=2, beams=4, max_new_tokens=5, page_size=4, pages=6,
                       max_prompt_length=10)
    fp8 = KVCache(shape, torch.float32, torch.device("cpu"), torch.float8_e4m3fn)
    exact = KVCache(shape, torch.float32, torch.device("cpu"))
    fp8.set_scales([3.0, 5.0], [2.0, 7.0])
    assert fp8.k_scale == [3.0 / 448, 5.0 / 448] and fp8.prompt_k.dtype == torch.float8_e4m3fn
    for cache in (fp8, exact):
        cache.assign(0, 10)
        cache.assign(1, 7)
        cache.set_tables([0, 1], [10, 7])
    where_prompt = fp8.prompt_write_index([0, 1], [10, 7])
    k, v = torch.randn(17, 2, 8), torch.randn(17, 2, 8)
    rows, columns = torch.arange(8), torch.tensor([0, 0, 0, 0, 1, 1, 1, 1])
    gk, gv = torch.randn(8, 2, 8), torch.randn(8, 2, 8)
    for cache in (fp8, exact):
        cache.write_prompt(1, where_prompt, k, v)
        cache.write_generated(1, rows, columns, gk, gv)
    # Layer 1's magnitudes are 5 (keys) and 7 (values): stored values saturate there and are off by at most half a
    # unit in e4m3's last place (3 mantissa bits: 2**-4 of the magnitude) above it.
    e4m3 = 2.0**-4
    flat = fp8.gen_k[1].view(-1, 2, 8), fp8.gen_v[1].view(-1, 2, 8)
    where = rows * shape.max_new_tokens + columns  # where write_generated put each row's token
    pool_rows = fp8.prompt_k[1].view(-1, 2, 8), fp8.prompt_v[1].view(-1, 2, 8)
    for stored, scale, want, amax in ((pool_rows[0][where_prompt], fp8.k_scale[1], k, 5.0),
                                      (pool_rows[1][where_prompt], fp8.v_scale[1], v, 7.0),
                                      (flat[0][where], fp8.k_scale[1], gk, 5.0),
                                      (flat[1][where], fp8.v_scale[1], gv, 7.0)):
        error = (fp8.read(stored, scale) - want.clamp(-amax, amax)).abs()
        assert bool((error <= want.abs().clamp(max=amax) * e4m3 + scale * 2.0**-9).all())
    # attention over the FP8 cache == attention over an exact cache holding the dequantized values
    for name, scale in (("prompt_k", fp8.k_scale[1]), ("prompt_v", fp8.v_scale[1]), ("gen_k", fp8.k_scale[1]),
                        ("gen_v", fp8.v_scale[1])):
        getattr(exact, name)[1] = getattr(fp8, name)[1].float() * scale
    ancestry = torch.randint(0, 4, (2, 4, 5), dtype=torch.int32)
    counts = torch.tensor([2, 1])
    q = torch.randn(8, 2, 8)
    torch.testing.assert_close(decode_attention_reference(q, fp8, 1, ancestry, counts),
                               decode_attention_reference(q, exact, 1, ancestry, counts))


def test_fp8_engine_on_cpu_runs_calibrated_gemms_and_cache(model, prompts):
    """FP8 GEMMs (emulated on the CPU from the quantized operands) and an FP8 cache, calibrated on the prompts:
    prefill logits stay close to float32's and every sample ends with a valid output."""
    reference = InflightModel.from_model(model)
    fp8 = InflightModel.from_model(model)
    tensors = [torch.as_tensor(p, dtype=torch.long) for p in prompts]
    amax = fp8.collect_amax(tensors)
    assert len(amax.gemm_in) == TINY.n_layer and min(amax.k) > 0 and min(amax.gemm_out) > 0
    fp8.use_fp8_gemms(amax)
    assert fp8.uses_fp8_gemms and fp8.layers[0].w_in.numel() == 0
    options = EngineOptions(slots=4, max_prompt_length=72, page_size=16)
    want = InflightEngine(reference, GenerationConfig(), options)
    engine = InflightEngine(fp8, GenerationConfig(), EngineOptions(**{**options.__dict__,
                                                                      "kv_dtype": torch.float8_e4m3fn}), amax)
    slots = list(range(4))
    for e in (want, engine):
        for slot, p in zip(slots, tensors[:4], strict=True):
            e.cache.assign(slot, len(p))
    logits = [e.model.prefill(tensors[:4], slots, e.cache) for e in (want, engine)]
    error = float((logits[1] - logits[0]).norm() / logits[0].norm())
    assert 0 < error < 0.1, error  # e4m3 rounds each operand by up to 2**-4: a plumbing check, not a gate
    with pytest.raises(ValueError, match="kv_amax"):
        InflightEngine(reference, GenerationConfig(), EngineOptions(**{**options.__dict__,
                                                                       "kv_dtype": torch.float8_e4m3fn}))
    got = InflightEngine(fp8, GenerationConfig(), EngineOptions(**{**options.__dict__,
                                                                   "kv_dtype": torch.float8_e4m3fn}),
                         amax).generate(prompts)
    assert all(31 <= len(g) <= 128 and g.dtype == np.int32 for g in got)


def test_fp8_fast_accumulation_is_set_on_every_fp8_gemm(model, prompts):
    """``use_fp8_gemms(fast_accum=)`` and ``set_fp8_fast_accum`` reach both GEMMs of every layer (what
    ``torch._scaled_mm`` is called with on a GPU); a 16-bit model has no FP8 GEMM to set."""
    inflight = InflightModel.from_model(model)
    with pytest.raises(ValueError, match="use_fp8_gemms first"):
        inflight.set_fp8_fast_accum(True)
    inflight.use_fp8_gemms(inflight.collect_amax([torch.as_tensor(p, dtype=torch.long) for p in prompts[:2]]),
                           fast_accum=True)
    gemms = [g for layer in inflight.layers for g in layer.fp8.values()]
    assert len(gemms) == 2 * TINY.n_layer and all(g.fast_accum for g in gemms)
    inflight.set_fp8_fast_accum(False)
    assert not any(g.fast_accum for g in gemms)


def test_compiled_decode_elementwise_matches_the_plain_functions():
    """What the GPU's decode step runs (``torch.compile`` of the four functions, static shapes) computes what the
    plain functions define, in float32 and through the FP8 quantization with padded rows; fullgraph compilation
    also proves the functions trace without graph breaks."""
    from code.gptj.inflight.elementwise import Elementwise
    from code.gptj.model import rope_table
    from code.numerics.fp8 import E4M3_REL_ERROR

    gen = torch.Generator().manual_seed(0)
    rows, heads, head_dim, inner = 24, 2, 32, 256
    width = heads * head_dim
    plain, compiled = Elementwise(compiled=False).decode, Elementwise(compiled=True).decode
    x, out = torch.randn(rows, width, generator=gen), torch.randn(32, width, generator=gen)
    weight, bias = torch.rand(width, generator=gen) + 0.5, torch.randn(width, generator=gen)
    fused = torch.randn(32, 3 * width + inner, generator=gen)
    attended = torch.randn(rows, heads, head_dim, generator=gen)
    rope = rope_table(64, 16)[torch.arange(rows)][:, None, None]
    for scale, align in ((None, 1), (torch.tensor(0.02), 16)):
        def same(a: torch.Tensor, b: torch.Tensor, scale: torch.Tensor | None = scale) -> None:
            assert a.shape == b.shape and a.dtype == b.dtype
            if scale is None:
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            else:  # e4m3 may round the last float32 bit either way: one e4m3 step at most
                torch.testing.assert_close(a.float(), b.float(), rtol=2 * E4M3_REL_ERROR, atol=2.0**-9)

        same(compiled.norm_in(x, weight, bias, 1e-5, scale, align), plain.norm_in(x, weight, bias, 1e-5, scale, align))
        for got, want in zip(compiled.residual_norm_in(out, x, weight, bias, 1e-5, scale, align),
                             plain.residual_norm_in(out, x, weight, bias, 1e-5, scale, align), strict=True):
            same(got, want)
        for got, want in zip(compiled.rotary_qkv(fused, rope, rows, heads, head_dim),
                             plain.rotary_qkv(fused, rope, rows, heads, head_dim), strict=True):
            same(got, want, None)
        mlp = compiled.mlp_in(fused, attended, scale, align)
        same(mlp, plain.mlp_in(fused, attended, scale, align))
        assert mlp.shape == (rows + (-rows % align), width + inner)


def test_one_beam_is_greedy_decoding(model, prompts):
    """``num_beams=1``: the engine's tokens are ``generate``'s greedy ones (code/llm/beam_search.py's one-beam
    step), slots freed and refilled as samples end."""
    config = GenerationConfig(num_beams=1)
    model.setup_caches(*cache_shape(LENGTHS, config))
    expected = generate(model, prompts, config)
    engine = InflightEngine(InflightModel.from_model(model), config,
                            EngineOptions(slots=3, max_prompt_length=72, page_size=16))
    for g, e in zip(engine.generate(prompts), expected, strict=True):
        np.testing.assert_array_equal(g, e)
    assert len({len(e) for e in expected}) >= 3  # EOS after min_new_tokens at several lengths
