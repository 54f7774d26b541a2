"""UOL-backed nn.Modules and `swap_modules`, which puts them in place of torch's own.

Each module runs a library ODL op (or one written from a template, e.g. LayerNorm with the
module's eps) through `to_torch`: compiled kernels forward, derived kernels backward.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import torch
from torch import nn

from uol_core.odl import parse
from uol_core.torch.bridge import TorchOp, to_torch
from uol_core.torch.fuse_calls import fuse_activation_calls
from uol_core.torch.nn_mlp import UolMLP, activation_of, as_rows, from_rows, layer_spec

_LINEAR = """op {name}(X: f32[M, K], W: f32[K, N], b: f32[N]) -> Y: f32[M, N]:
    Y[m, n] = {body}
"""
_LAYERNORM = """op layernorm_eps(X: f32[R, C], gamma: f32[C], beta: f32[C]) -> Y: f32[R, C]:
    mu[r] = mean[c](X[r, c])
    var[r] = mean[c]((X[r, c] - mu[r]) ** 2)
    Y[r, c] = (X[r, c] - mu[r]) * rsqrt(var[r] + {eps!r}) * gamma[c] + beta[c]
"""
_RMSNORM = """op rmsnorm_eps(X: f32[R, C], gamma: f32[C]) -> Y: f32[R, C]:
    ms[r] = mean[c](X[r, c] * X[r, c])
    Y[r, c] = X[r, c] * rsqrt(ms[r] + {eps!r}) * gamma[c]
"""


def linear_op(activation: str | None, backend: str = "auto") -> TorchOp:
    """Y = act(X @ W + b) as a differentiable torch function."""
    inner = "sum[k](X[m, k] * W[k, n]) + b[n]"
    body = f"{activation}({inner})" if activation else inner
    name = f"linear_bias_{activation}" if activation else "linear_bias"
    return to_torch(parse(_LINEAR.format(name=name, body=body)), backend)


class UolLinear(nn.Module):
    """Linear layer (+ optional fused activation). The weight is stored [in, out]."""

    def __init__(self, in_features: int, out_features: int, activation: str | None = None,
                 backend: str = "auto") -> None:
        super().__init__()
        self.in_features, self.out_features = in_features, out_features  # as nn.Linear names them
        self.weight = nn.Parameter(torch.empty(in_features, out_features))
        self.bias = nn.Parameter(torch.zeros(out_features))
        nn.init.kaiming_uniform_(self.weight.T, a=5**0.5)
        self.activation = activation
        self.fn = linear_op(activation, backend)

    @classmethod
    def from_torch(cls, linear: nn.Linear, activation: str | None = None,
                   backend: str = "auto") -> UolLinear:
        module = cls(linear.in_features, linear.out_features, activation, backend).to(
            device=linear.weight.device, dtype=linear.weight.dtype)
        with torch.no_grad():
            module.weight.copy_(linear.weight.T)
            if linear.bias is not None:
                module.bias.copy_(linear.bias)
        module.bias.requires_grad_(linear.bias is not None)
        return module

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return from_rows(self.fn(as_rows(x), self.weight, self.bias), x)


class UolLayerNorm(nn.Module):
    """LayerNorm over the last axis, with the module's eps written into the ODL."""

    def __init__(self, size: int, eps: float = 1e-5, backend: str = "auto") -> None:
        super().__init__()
        self.normalized_shape, self.eps = (size,), float(eps)  # as nn.LayerNorm names them
        self.weight = nn.Parameter(torch.ones(size))
        self.bias = nn.Parameter(torch.zeros(size))
        self.fn = to_torch(parse(_LAYERNORM.format(eps=float(eps))), backend)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return from_rows(self.fn(as_rows(x), self.weight, self.bias), x)


class UolRMSNorm(nn.Module):
    """RMSNorm over the last axis."""

    def __init__(self, size: int, eps: float = 1e-6, backend: str = "auto") -> None:
        super().__init__()
        self.normalized_shape, self.eps = (size,), float(eps)  # as nn.RMSNorm names them
        self.weight = nn.Parameter(torch.ones(size))
        self.fn = to_torch(parse(_RMSNORM.format(eps=float(eps))), backend)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return from_rows(self.fn(as_rows(x), self.weight), x)


class UolAttention(nn.Module):
    """Softmax attention on [batch, heads, seq, head_dim] tensors (the library's
    attention_batched op, scale written for the head size; `causal` masks keys after the
    query, as torch's `is_causal=True`)."""

    def __init__(self, head_dim: int, backend: str = "auto", causal: bool = False) -> None:
        super().__init__()
        score = f"sum[d](Q[b, h, i, d] * K[b, h, j, d]) * {float(head_dim) ** -0.5!r}"
        if causal:  # key j visible from query i when j <= i (torch's is_causal=True)
            score = f"where(j <= i, {score}, -1e30)"
        self.fn = to_torch(parse(_ATTENTION.format(score=score)), backend)

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return self.fn(q.contiguous(), k.contiguous(), v.contiguous())


_ATTENTION = """op attention_scaled(Q: f32[B, NH, S, D], K: f32[B, NH, T, D], V: f32[B, NH, T, D]) -> O: f32[B, NH, S, D]:
    s[b, h, i, j] = {score}
    mx[b, h, i] = max[j](s[b, h, i, j])
    p[b, h, i, j] = exp(s[b, h, i, j] - mx[b, h, i])
    l[b, h, i] = sum[j](p[b, h, i, j])
    O[b, h, i, d] = sum[j](p[b, h, i, j] * V[b, h, j, d]) / l[b, h, i]
"""


def swap_modules(model: nn.Module, backend: str = "auto", mlp: bool = True,
                 calls: bool = True) -> list[str]:
    """Replace supported submodules in place; returns what was swapped (dotted names).

    With `mlp` (the default), a run of two or more layers in a Sequential (Linear with an
    optional ReLU / GELU (exact or tanh) / SiLU after it, LayerNorm, RMSNorm) becomes one
    `UolMLP` in the run's first slot, the rest turning into Identity; otherwise, and for layers
    outside such runs, Linear followed by an activation becomes one fused UolLinear, other
    Linear, LayerNorm and RMSNorm layers their Uol versions. With `calls` (the default), a
    Linear whose output only an activation call in its parent's forward reads
    (`F.gelu(self.fc(x))`) is fused with it too, and that forward rewritten (`fuse_calls`).
    Modules that read their children's weights directly (`READS_CHILD_WEIGHTS`: torch's
    attention and transformer layers) keep their children as they are.
    """
    counts = Counter(id(p) for _, p in model.named_parameters(remove_duplicate=False))
    job = _SwapJob(backend, mlp, calls, frozenset(i for i, n in counts.items() if n > 1))
    _swap(model, "", job)
    return job.swapped


@dataclass
class _SwapJob:
    """One `swap_modules` call: its options, the parameters shared between modules (a tied
    embedding and output layer: a Uol layer holds its own copy, which would untie them, so
    layers holding one stay torch's) and what it swapped."""

    backend: str
    mlp: bool
    calls: bool
    tied: frozenset[int]
    swapped: list[str] = field(default_factory=list)

    def may_swap(self, module: nn.Module) -> bool:
        return not any(id(p) in self.tied for p in module.parameters(recurse=False))

    def linear(self, linear: nn.Linear, activation: str | None) -> UolLinear | None:
        return UolLinear.from_torch(linear, activation, self.backend) \
            if self.may_swap(linear) else None


# torch modules whose forward reads their children's parameters directly rather than calling
# the children: MultiheadAttention passes out_proj.weight to its functional form, and the
# transformer layers' inference fast path passes every linear and norm weight to one fused op.
# A UolLinear stores its weight [in, out], so under them a swap would compute something else.
READS_CHILD_WEIGHTS = (nn.MultiheadAttention, nn.TransformerEncoderLayer,
                       nn.TransformerDecoderLayer, nn.TransformerEncoder, nn.TransformerDecoder,
                       nn.Transformer)


def _swap(module: nn.Module, prefix: str, job: _SwapJob) -> None:
    if isinstance(module, READS_CHILD_WEIGHTS):
        return
    backend, swapped = job.backend, job.swapped
    if job.calls and not isinstance(module, nn.Sequential):
        swapped += fuse_activation_calls(module, job.linear, prefix)
    names = list(module._modules)
    children = [module._modules[n] for n in names]
    index = 0
    while index < len(names):
        name, child = names[index], children[index]
        path = f"{prefix}{name}"
        if child is None:
            index += 1
            continue
        chain = _chain(children, index, job) if job.mlp and isinstance(module, nn.Sequential) \
            else []
        if len(chain) >= 2:
            module._modules[name] = UolMLP.from_torch(children, [s for s, _ in chain], backend)
            taken = sum(n for _, n in chain)
            for other in names[index + 1: index + taken]:
                module._modules[other] = nn.Identity()
            swapped.append(f"{path}-{prefix}{names[index + taken - 1]} (mlp)")
            index += taken
            continue
        nxt = children[index + 1] if index + 1 < len(names) else None
        step = 1
        if isinstance(child, (nn.Linear, nn.LayerNorm, nn.RMSNorm)) and not job.may_swap(child):
            pass  # a layer holding a tied parameter stays torch's
        elif isinstance(child, nn.Linear):
            act = activation_of(nxt) if isinstance(module, nn.Sequential) else None
            module._modules[name] = UolLinear.from_torch(child, act, backend)
            if act:
                module._modules[names[index + 1]] = nn.Identity()
                step = 2
            swapped.append(path + (f"+{act}" if act else ""))
        elif isinstance(child, (nn.LayerNorm, nn.RMSNorm)) and \
                (found := layer_spec(children, index)) is not None:
            spec = found[0]
            kind = UolLayerNorm if spec.kind == "layernorm" else UolRMSNorm
            new = kind(spec.size_in, spec.eps, backend).to(device=child.weight.device,
                                                           dtype=child.weight.dtype)
            new.load_state_dict(child.state_dict())
            module._modules[name] = new
            swapped.append(path)
        else:
            _swap(child, path + ".", job)
        index += step


def _chain(children: list[nn.Module], start: int, job: _SwapJob) -> list[tuple]:
    """The longest run of supported layers from `start` (layer spec, modules it takes)."""
    chain: list[tuple] = []
    at = start
    while at < len(children):
        found = layer_spec(children, at)
        if found is None or not job.may_swap(children[at]):
            break
        chain.append(found)
        at += found[1]
    return chain
