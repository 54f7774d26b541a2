"""The GEMM-family templates: the BLIS-style packed kernel, the direct path for small or
thin operands, the SVE variant and the bf16 kernels."""
