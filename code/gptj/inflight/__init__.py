"""In-flight (continuous) batching of GPT-J beam search: the engine behind the ``inflight`` backend.

A fixed number of *slots* each hold one sample (its 4 beams) from admission to its last token; whenever a slot
frees, the next sample is prefilled into it while the others keep decoding, so the GPU never waits for the
slowest sample of a batch. The pieces, each in its own module:

- ``layers.py``: GPT-J's weights regrouped for inference (the parallel residual lets the QKV and first MLP
  GEMMs read one LayerNorm output, and the attention-output and second MLP GEMMs add into one sum, so each pair
  is one GEMM) and the prefill / decode forwards.
- ``code/llm/kv_cache.py``: the prompt's keys and values in pages shared by a sample's beams, each beam's generated
  tokens in its own rows, and the beam ancestry table through which a beam reads its history without copies.
- ``code/llm/paged_attention.py``: decode attention over that cache (Triton on CUDA; a plain PyTorch reference
  elsewhere), and prefill attention over packed prompts.
- ``elementwise.py``, ``prefill_kernels.py``: the work between the GEMMs, fused (Inductor for the decode step,
  hand-written Triton passes for prompt passes).
- ``code/llm/beam_search.py``: one beam-search step for every slot at once, each slot at its own step.
- ``code/llm/inflight_engine.py``: the loop, shared with Llama 3.1: take samples, admit, step, complete; CUDA
  graphs for the step.
"""
