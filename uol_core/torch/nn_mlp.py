"""A chain of Linear (+ activation) and LayerNorm / RMSNorm layers as one ODL op (`UolMLP`).

Per-layer modules pay the Python side of a custom-op call (about 100 us in eager mode with the
backward) once per layer and direction; for a small MLP that is more than its GEMMs. One op for
the whole chain pays it once: the forward is one call that runs every layer's kernels in
order, the derived backward one call for all gradients, and the dispatcher's grouping lets the
bias and norm gradients of every layer ride the same passes.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from uol_core.odl import parse
from uol_core.odl.ir import GELU_FORMS
from uol_core.torch.bridge import to_torch

ACTIVATIONS = {nn.ReLU: "relu", nn.GELU: "gelu", nn.SiLU: "silu"}


@dataclass(frozen=True)
class LayerSpec:
    """One layer of the chain: where it sat in the Sequential and what it computes."""

    index: int
    kind: str  # "linear", "layernorm" or "rmsnorm"
    size_in: int
    size_out: int
    activation: str | None = None
    bias: bool = True
    eps: float = 1e-5


def activation_of(module: nn.Module | None) -> str | None:
    """The ODL function of a supported activation module (GELU's exact or tanh form)."""
    for kind, name in ACTIVATIONS.items():
        if isinstance(module, kind):
            return gelu_function(getattr(module, "approximate", "none")) if name == "gelu" else name
    return None


def gelu_function(approximate: str) -> str | None:
    """The ODL function of torch's GELU with this `approximate` ("none" or "tanh")."""
    return GELU_FORMS.get(approximate)


def as_rows(x: torch.Tensor) -> torch.Tensor:
    """Leading axes folded into rows, as the row-wise ops expect. Rows already are passed as
    they are: a reshape to the same shape is still a view, and each view is one more node for
    the backward to run (about 5 us a direction)."""
    if x.dim() == 2 and x.is_contiguous():
        return x
    return x.reshape(-1, x.shape[-1]).contiguous()


def from_rows(y: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """`y`, rows of the row-wise op, back in the leading axes of its input `x`."""
    return y if x.dim() == 2 else y.reshape(*x.shape[:-1], y.shape[-1])


def layer_spec(modules: list[nn.Module], at: int) -> tuple[LayerSpec, int] | None:
    """The layer starting at `modules[at]` and how many modules it takes, or None."""
    module = modules[at]
    if isinstance(module, nn.Linear):
        act = activation_of(modules[at + 1]) if at + 1 < len(modules) else None
        spec = LayerSpec(at, "linear", module.in_features, module.out_features, act,
                         module.bias is not None)
        return spec, 2 if act else 1
    if isinstance(module, nn.LayerNorm) and len(module.normalized_shape) == 1 \
            and module.elementwise_affine and module.bias is not None:
        size = module.normalized_shape[0]
        return LayerSpec(at, "layernorm", size, size, eps=float(module.eps)), 1
    if isinstance(module, nn.RMSNorm) and len(module.normalized_shape) == 1 \
            and module.elementwise_affine:
        size = module.normalized_shape[0]
        eps = module.eps if module.eps is not None else torch.finfo(torch.float32).eps
        return LayerSpec(at, "rmsnorm", size, size, eps=float(eps)), 1
    return None


def mlp_odl(specs: list[LayerSpec], name: str = "mlp") -> str:
    """The ODL op of the chain: X in, Y out, each layer reading the one before it."""
    dims = ["D0"]
    params: list[str] = []
    stmts: list[str] = []
    prev = "X"
    for number, spec in enumerate(specs):
        out = "Y" if number == len(specs) - 1 else f"h{spec.index}"
        d_in, p = dims[-1], f"l{spec.index}"
        if spec.kind == "linear":
            dims.append(f"D{len(dims)}")
            params.append(f"{p}_weight: f32[{d_in}, {dims[-1]}]")
            body = f"sum[k]({prev}[m, k] * {p}_weight[k, n])"
            if spec.bias:
                params.append(f"{p}_bias: f32[{dims[-1]}]")
                body += f" + {p}_bias[n]"
            stmts.append(f"{out}[m, n] = {spec.activation}({body})" if spec.activation
                         else f"{out}[m, n] = {body}")
        elif spec.kind == "layernorm":
            params += [f"{p}_weight: f32[{d_in}]", f"{p}_bias: f32[{d_in}]"]
            mu, var = f"mu{spec.index}", f"var{spec.index}"
            stmts += [f"{mu}[m] = mean[c]({prev}[m, c])",
                      f"{var}[m] = mean[c](({prev}[m, c] - {mu}[m]) ** 2)",
                      f"{out}[m, c] = ({prev}[m, c] - {mu}[m]) * rsqrt({var}[m] + {spec.eps!r})"
                      f" * {p}_weight[c] + {p}_bias[c]"]
        else:
            params.append(f"{p}_weight: f32[{d_in}]")
            ms = f"ms{spec.index}"
            stmts += [f"{ms}[m] = mean[c]({prev}[m, c] * {prev}[m, c])",
                      f"{out}[m, c] = {prev}[m, c] * rsqrt({ms}[m] + {spec.eps!r})"
                      f" * {p}_weight[c]"]
        prev = out
    header = f"op {name}(X: f32[M, D0], {', '.join(params)}) -> Y: f32[M, {dims[-1]}]:"
    return "\n    ".join([header, *stmts]) + "\n"


class UolMLP(nn.Module):
    """Linear (+ ReLU / GELU / SiLU) and LayerNorm / RMSNorm layers run as one UOL op.

    Parameters keep the Sequential's layout by position: `l{i}_weight`, `l{i}_bias`, with
    linear weights stored [in, out] as in `UolLinear`."""

    def __init__(self, specs: list[LayerSpec], backend: str = "auto") -> None:
        super().__init__()
        self.specs = list(specs)
        self.param_names: list[str] = []
        for spec in self.specs:
            shape = (spec.size_in, spec.size_out) if spec.kind == "linear" else (spec.size_in,)
            self._add(f"l{spec.index}_weight", torch.ones(shape))
            if spec.kind == "layernorm" or (spec.kind == "linear" and spec.bias):
                self._add(f"l{spec.index}_bias", torch.zeros(spec.size_out))
        self.fn = to_torch(parse(mlp_odl(self.specs)), backend)

    def _add(self, name: str, value: torch.Tensor) -> None:
        self.register_parameter(name, nn.Parameter(value))
        self.param_names.append(name)

    @classmethod
    def from_torch(cls, modules: list[nn.Module], specs: list[LayerSpec],
                   backend: str = "auto") -> UolMLP:
        """The chain `specs` (positions in `modules`) with the torch layers' weights."""
        first = modules[specs[0].index].weight
        mlp = cls(specs, backend).to(device=first.device, dtype=first.dtype)
        with torch.no_grad():
            for spec in specs:
                layer = modules[spec.index]
                weight = layer.weight.T if spec.kind == "linear" else layer.weight
                getattr(mlp, f"l{spec.index}_weight").copy_(weight)
                if f"l{spec.index}_bias" in mlp.param_names:
                    getattr(mlp, f"l{spec.index}_bias").copy_(layer.bias)
        return mlp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the parameter dict directly: Module.__getattr__ costs about 0.5 us a name
        params = self._parameters
        return from_rows(self.fn(as_rows(x), *[params[n] for n in self.param_names]), x)

    def extra_repr(self) -> str:
        return ", ".join(f"{s.kind}{'+' + s.activation if s.activation else ''}"
                         f"({s.size_in}->{s.size_out})" for s in self.specs)
