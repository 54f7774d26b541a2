"""The operator families of the optimisation guide: one library operator per family, at the
sizes a model typically runs it (LLM token blocks, ResNet-50 feature maps, a batch of rows)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Family:
    """One family: its name, the library op that represents it, and its typical sizes."""

    name: str
    op: str
    sizes: dict
    why: str  # what the family stands for in a model

    @property
    def label(self) -> str:
        return f"{self.name} ({self.op} at {', '.join(f'{k}={v}' for k, v in self.sizes.items())})"


FAMILIES: tuple[Family, ...] = (
    Family("gemm", "matmul", {"M": 1024, "K": 1024, "N": 1024}, "a dense layer's weight product"),
    Family("gemm-large", "matmul", {"M": 4096, "K": 4096, "N": 4096}, "a large training GEMM"),
    Family("gemv", "matvec", {"M": 4096, "K": 4096}, "decoding one token through a layer"),
    Family("batched-gemm", "bmm", {"B": 16, "M": 256, "K": 64, "N": 256}, "per-head score products"),
    Family("linear-gelu", "linear_bias_gelu", {"M": 512, "K": 1024, "N": 4096},
           "an MLP up-projection with its bias and activation fused"),
    Family("swiglu-mlp", "swiglu_mlp", {"M": 256, "D": 1024, "H": 2816}, "a gated LLM MLP block"),
    Family("attention", "attention", {"S": 1024, "T": 1024, "D": 64, "E": 64},
           "one head of encoder attention"),
    Family("attention-long", "attention", {"S": 4096, "T": 4096, "D": 128, "E": 128},
           "one head at a long context"),
    Family("causal-attention", "causal_attention", {"S": 2048, "D": 64}, "decoder self-attention"),
    Family("conv2d", "conv2d", {"N": 8, "C": 64, "H": 56, "W": 56, "K": 64, "R": 3, "S": 3},
           "a ResNet 3x3 convolution"),
    Family("depthwise-conv", "depthwise_conv2d", {"N": 8, "C": 128, "H": 56, "W": 56, "R": 3,
                                                  "S": 3}, "a MobileNet depthwise convolution"),
    Family("pooling", "maxpool2d", {"N": 8, "C": 64, "H": 56, "W": 56}, "2x2 max pooling"),
    Family("softmax", "softmax", {"R": 4096, "C": 1024}, "attention probabilities, row by row"),
    Family("log-softmax", "log_softmax", {"R": 2048, "C": 8192}, "a classifier's log-probabilities"),
    Family("cross-entropy", "cross_entropy", {"R": 2048, "C": 8192}, "the training loss"),
    Family("layernorm", "layernorm", {"R": 4096, "C": 1024}, "transformer normalisation"),
    Family("rmsnorm", "rmsnorm", {"R": 4096, "C": 4096}, "LLM normalisation"),
    Family("groupnorm", "groupnorm", {"N": 8, "G": 32, "C": 8, "L": 4096},
           "diffusion-model normalisation"),
    Family("batchnorm", "batchnorm_inference", {"N": 8, "C": 64, "H": 56, "W": 56},
           "folded inference batch norm"),
    Family("elementwise-unary", "gelu", {"M": 4096, "N": 4096}, "an activation on its own"),
    Family("elementwise-binary", "add", {"M": 4096, "N": 4096}, "a residual add"),
    Family("row-reduction", "row_sum", {"R": 4096, "C": 4096}, "a sum over the last axis"),
    Family("scan", "cumsum", {"R": 1024, "C": 4096}, "a prefix sum"),
    Family("stencil", "stencil5", {"H": 2048, "W": 2048}, "a 5-point stencil"),
    Family("transpose", "transpose", {"M": 4096, "N": 4096}, "a layout change"),
    Family("permute", "permute_0213", {"A": 8, "B": 512, "C": 16, "D": 64},
           "splitting heads (B, S, H, D) -> (B, H, S, D)"),
    Family("rope", "rope", {"S": 4096, "P": 64}, "rotary position embedding"),
    Family("padding", "constant_pad_cols", {"M": 4096, "N": 4096}, "padding a tensor's columns"),
)


def family(name: str) -> Family:
    """The family called `name`; a KeyError lists the known ones."""
    for fam in FAMILIES:
        if fam.name == name:
            return fam
    raise KeyError(f"no guide family '{name}'; known: {', '.join(f.name for f in FAMILIES)}")
