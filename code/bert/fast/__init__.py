"""The packed GPU path for BERT: variable-length batches as one token stream, fused kernels, FP8 GEMMs, CUDA graphs.

Modules: ``packing`` (host-side packing and bucketing, numpy only), ``fp8`` (scales and the FP8 linear),
``kernels`` (Triton kernels; imports triton, so only the GPU path imports it), ``packed_model`` (the encoder over
``[T]`` tokens, with a pure-torch fallback for CPU tests) and ``graphs`` (CUDA graphs per token bucket).
documentation/bert_gpu.md describes the whole path.
"""
