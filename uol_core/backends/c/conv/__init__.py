"""The convolution templates: the direct row kernels, depthwise, im2col and SVE variants."""
