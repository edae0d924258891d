"""Numeric building blocks that more than one benchmark's GPU path uses (FP8 quantization and its GEMM)."""
