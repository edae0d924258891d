"""The packed GPU path for BERT: variable-length batches as one token stream, fused kernels, 8-bit GEMMs (FP8, INT8),
CUDA graphs.

Modules: ``spec`` (``PackedKernels``: an engine's switches, declared to the configuration with their rules; torch-free),
``packing`` (host-side packing and bucketing, numpy only), ``kernels`` (Triton kernels; imports triton, so
only the GPU path imports it), ``attention`` (the varlen attention kernel), ``tuning`` (its tile shape, timed once
at engine load), ``cublaslt`` (FP8 GEMMs with epilogues; INT8's are ``code/numerics/int8_gemm.py``),
``packed_model`` (the encoder over ``[T]`` tokens, with a pure-torch fallback for CPU tests), ``graphs`` (CUDA graphs
per token bucket) and ``runner`` (``PackedRunner``: what the pytorch backend runs on CUDA, one context per worker
thread). documentation/bert_gpu.md describes the whole path.
"""
