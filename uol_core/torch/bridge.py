"""ODL ops as PyTorch custom ops with derived backward kernels (entry point `to_torch`).

Each op is registered once as `uol::<name>` through `torch.library`: a real kernel for the
forward, a fake (shape-only) kernel so `torch.compile` traces it without a graph break, and an
autograd formula that runs the derived backward op (`uol_core.odl.grad`) on the same backend.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import torch

from uol_core.api import load_any
from uol_core.odl.grad import GradOp, derive_grad, differentiable_inputs
from uol_core.odl.ir import Op, retyped
from uol_core.odl.printer import format_op
from uol_core.odl.shapes import bind_sizes, shape_of
from uol_core.runtime.dispatch import OpRunner, output_dtypes, whole_op_template
from uol_core.runtime.launch import LaunchPlan, plan_for
from uol_core.runtime.reference import TORCH_DTYPES

_LIBRARY = torch.library.Library("uol", "FRAGMENT")
_REGISTERED: dict[str, TorchOp] = {}
_ODL_TYPES = {t: d for d, t in TORCH_DTYPES.items()}
_UNPLANNED = object()


class TorchOp:
    """A callable `f(*inputs)` in the op's input order, differentiable, usable in nn.Modules."""

    def __init__(self, op: Op, backend: str, target: str) -> None:
        self.op = op
        self.backend = backend
        self.target = target
        self.differentiable = differentiable_inputs(op)
        # Attention-like ops whose fused C backward recomputes the wide scores save less (see
        # `_wide_backward`); every dtype variant and gradient subset follows the same choice,
        # so the forward's saves are what each backward reads.
        self._wide = bool(self.differentiable) and _wide_backward(op)
        self._grad: GradOp | None = derive_grad(op, recompute_wide=self._wide) \
            if self.differentiable else None
        # The forward runs the op that also writes what the backward saves (z of a linear
        # layer, row statistics of a norm); callers see only the op's own outputs.
        self.forward_op = self._grad.forward_with_saves if self._grad else op
        self.forward_runner = OpRunner(self.forward_op, backend, target)
        self._variants: dict[torch.dtype, tuple[OpRunner, OpRunner | None]] = {}
        self.inputs = [d.name for d in op.inputs]
        self.outputs = [d.name for d in op.outputs]
        self.all_outputs = [d.name for d in self.forward_op.outputs]
        self._plans: dict[tuple, LaunchPlan | None] = {}
        self._subsets: dict[tuple[str, ...], tuple[GradOp, OpRunner] | None] = {}
        digest = hashlib.sha1(f"{format_op(op)}|{backend}|{target}".encode()).hexdigest()[:10]
        self.qualname = f"uol::{op.name}_{digest}"
        self._register(digest)

    @property
    def grad(self) -> GradOp:
        """The derived backward op."""
        if self._grad is None:
            raise TypeError(f"{self.op.name} has no float input to differentiate")
        return self._grad

    def runners(self, values: tuple[torch.Tensor, ...]) -> tuple[OpRunner, OpRunner]:
        """Forward and backward runners for the float type of the given tensors: an f32 op fed
        f64 tensors runs as f64 (so gradcheck sees double precision), and so on."""
        floats = [v.dtype for n, v in zip(self.inputs, values) if n in self.differentiable]
        return self._variant(floats[0] if floats else torch.float32)

    def _variant(self, dtype: torch.dtype) -> tuple[OpRunner, OpRunner]:
        if dtype not in self._variants:
            declared = TORCH_DTYPES[self.op.tensor(self.differentiable[0]).dtype] \
                if self.differentiable else dtype
            if dtype == declared:
                forward, grad = self.forward_runner, self._grad
            else:
                op = retyped(self.op, _ODL_TYPES[dtype])
                grad = derive_grad(op, recompute_wide=self._wide) if self.differentiable else None
                forward = OpRunner(grad.forward_with_saves if grad else op, self.backend,
                                   self.target)
            self._variants[dtype] = (
                forward, OpRunner(grad.op, self.backend, self.target) if grad else None)
        return self._variants[dtype]

    def __call__(self, *args: torch.Tensor, **kwargs: torch.Tensor):
        if kwargs or len(args) != len(self.inputs):
            tensors = dict(zip(self.inputs, args))
            tensors.update(kwargs)
            missing = [n for n in self.inputs if n not in tensors]
            if missing:
                raise TypeError(f"{self.op.name} needs inputs {', '.join(missing)}")
            args = tuple(tensors[n] for n in self.inputs)
        ordered = list(args)
        if torch.compiler.is_compiling() or not _plain(ordered):
            result = self._op(*ordered)  # the registered custom op: traced, no graph break
        else:
            result = _EagerCall.apply(self, *ordered)
        result = result[: len(self.outputs)]
        return result[0] if len(self.outputs) == 1 else dict(zip(self.outputs, result))

    # ------------------------------------------------------------------ registration
    def _register(self, digest: str) -> None:
        name = f"{self.op.name}_{digest}"
        params = ", ".join(f"Tensor {n}" for n in self.inputs)
        returns = "Tensor" if len(self.all_outputs) == 1 else \
            "(" + ", ".join("Tensor" for _ in self.all_outputs) + ")"
        _LIBRARY.define(f"{name}({params}) -> {returns}")
        _LIBRARY.impl(name, self._forward_impl, "CompositeExplicitAutograd")
        torch.library.register_fake(self.qualname, self._fake_impl, lib=_LIBRARY)
        torch.library.register_autograd(self.qualname, self._backward, setup_context=self._setup,
                                        lib=_LIBRARY)
        namespace = getattr(torch.ops.uol, name)
        self._op: Callable = lambda *values: _as_tuple(namespace(*values))
        if self._grad is not None:
            self._register_grad(f"{name}_grad")

    def _register_grad(self, name: str) -> None:
        """The backward as an opaque custom op too: torch.compile then traces a training step
        (forward and backward graphs) without stepping into the kernels."""
        ins, outs = self._grad.op.inputs, self._grad.op.outputs
        returns = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
        _LIBRARY.define(f"{name}({', '.join(f'Tensor {d.name}' for d in ins)}) -> {returns}")
        _LIBRARY.impl(name, self._grad_impl, "CompositeExplicitAutograd")
        torch.library.register_fake(f"uol::{name}", self._grad_fake, lib=_LIBRARY)
        namespace = getattr(torch.ops.uol, name)
        self._grad_op: Callable = lambda *values: _as_tuple(namespace(*values))

    def _grad_impl(self, *values: torch.Tensor):
        dtype = next((v.dtype for v in values if v.is_floating_point()), torch.float32)
        result = self._run_grad(self.grad, lambda: self._variant(dtype)[1], list(values))
        return result[0] if len(result) == 1 else tuple(result)

    def _run_grad(self, grad: GradOp, runner: Callable[[], OpRunner],
                  values: list[torch.Tensor]) -> list[torch.Tensor]:
        """The gradient op's outputs, in order, for its inputs in order: through a launch
        plan when every step is a C kernel, else through the runner."""
        names = [d.name for d in grad.op.inputs]
        result = self._planned(("backward", grad.wrt), runner, names, values)
        if result is None:
            by_name = runner()(dict(zip(names, values)))
            result = [by_name[d.name] for d in grad.op.outputs]
        return result

    def _grad_fake(self, *values: torch.Tensor):
        grad = self.grad.op
        sizes = bind_sizes(grad, {d.name: tuple(v.shape) for d, v in zip(grad.inputs, values)})
        dtype = next((v.dtype for v in values if v.is_floating_point()), torch.float32)
        result = tuple(values[0].new_empty(shape_of(grad, d.name, sizes), dtype=dtype)
                       for d in grad.outputs)
        return result[0] if len(result) == 1 else result

    def _planned(self, key: tuple, runner: Callable[[], OpRunner], names: list[str],
                 values: list[torch.Tensor]):
        """Outputs of a runner through a launch plan made once per key, shapes and dtypes;
        None when the runner is not all C kernels."""
        key = (*key, *((v.shape, v.dtype) for v in values))
        plan = self._plans.get(key, _UNPLANNED)
        if plan is _UNPLANNED:
            plan = plan_for(runner(), dict(zip(names, values)), names)
            self._plans[key] = plan
        return None if plan is None else plan(values)

    def _forward_impl(self, *values: torch.Tensor):
        planned = self._planned(("forward",), lambda: self.runners(values)[0], self.inputs,
                                list(values))
        if planned is not None:
            return planned[0] if len(planned) == 1 else tuple(planned)
        outputs = self.runners(values)[0](dict(zip(self.inputs, values)))
        # A custom op may not return a view of its input (the reference can, for copies).
        storages = {v.untyped_storage().data_ptr() for v in values}
        result = tuple(outputs[n].clone() if outputs[n].untyped_storage().data_ptr() in storages
                       else outputs[n] for n in self.all_outputs)
        return result[0] if len(result) == 1 else result

    def _fake_impl(self, *values: torch.Tensor):
        sizes = bind_sizes(self.op, {n: tuple(v.shape) for n, v in zip(self.inputs, values)})
        dtypes = output_dtypes(self.forward_op)
        floats = [v.dtype for n, v in zip(self.inputs, values) if n in self.differentiable]
        if floats:  # outputs follow the float type the op runs in (see `runners`)
            dtypes = {n: floats[0] if t.is_floating_point else t for n, t in dtypes.items()}
        result = tuple(values[0].new_empty(shape_of(self.forward_op, n, sizes), dtype=dtypes[n])
                       for n in self.all_outputs)
        return result[0] if len(result) == 1 else result

    def _setup(self, ctx, inputs, output) -> None:
        outs = _as_tuple(output)
        ctx.save_for_backward(*inputs, *outs)

    def _backward(self, ctx, *upstream: torch.Tensor):
        # the eager call keeps the op's intermediates (never returned) beside the saved tensors
        saved = ctx.saved_tensors + getattr(ctx, "intermediates", ())
        inputs = saved[: len(self.inputs)]
        grad, runner = self.grad, lambda: self.runners(inputs)[1]
        traced = torch.compiler.is_compiling() or not _plain(list(saved))
        needs = tuple(getattr(ctx, "needs_input_grad", ()))[-len(self.inputs):]
        if len(needs) == len(self.inputs) and not traced:
            wanted = tuple(n for n, need in zip(self.inputs, needs) if need and n in grad.wrt)
            if not wanted:
                return (None,) * len(self.inputs)
            subset = self._subset_grad(wanted, inputs) if wanted != grad.wrt else None
            if subset is not None:
                grad, runner = subset[0], lambda: subset[1]
        outs = dict(zip(self.all_outputs, saved[len(self.inputs):]))
        feed = dict(zip(self.inputs, inputs))
        feed.update({n: outs[n] for n in (*grad.saved, *grad.saved_extra)})
        for name, up in zip(self.outputs, upstream):
            feed[grad.grad_of_output[name]] = (up if up is not None else torch.zeros_like(outs[name])).contiguous()
        values = [feed[d.name] for d in grad.op.inputs]
        # with fake tensors, the opaque backward op: traced as one node
        outputs = self._grad_op(*values) if traced else self._run_grad(grad, runner, values)
        result = dict(zip([d.name for d in grad.op.outputs], outputs))
        return tuple(result[grad.grad_of_input[n]] if n in grad.wrt else None for n in self.inputs)

    def _subset_grad(self, wanted: tuple[str, ...], inputs) -> tuple[GradOp, OpRunner] | None:
        """The backward for only the inputs that need a gradient (a first layer's dX is a
        whole GEMM nobody reads); None when it needs a value the forward did not save or the
        call runs in another float type than the op declares."""
        floats = [v.dtype for n, v in zip(self.inputs, inputs) if n in self.differentiable]
        if floats and floats[0] != TORCH_DTYPES[self.op.tensor(self.differentiable[0]).dtype]:
            return None
        if wanted not in self._subsets:
            sub = derive_grad(self.op, wanted, recompute_wide=self._wide)
            available = {*self.inputs, *self.all_outputs, *sub.grad_of_output.values()}
            usable = all(d.name in available for d in sub.op.inputs)
            self._subsets[wanted] = (sub, OpRunner(sub.op, self.backend, self.target)) \
                if usable else None
        return self._subsets[wanted]


class _EagerCall(torch.autograd.Function):
    """The same forward and backward as the registered custom op, called without the
    dispatcher: in eager mode its Python layers (schema checks, redispatch, the generic
    autograd wrapper) cost about 100 us a call, as much as a 128x256x256 GEMM here.
    Under torch.compile the custom op runs instead, so graphs still see one `uol::` node."""

    @staticmethod
    def forward(ctx, top: TorchOp, *values: torch.Tensor):
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None
        ctx.top = top
        outputs = _as_tuple(top._forward_impl(*values))
        returned = len(top.outputs)
        # Inputs and returned outputs are saved with version checks (a caller may change them
        # in place); the intermediates the backward reads (z of a linear, a norm's row
        # statistics) never leave this call, so they ride on ctx as they are: each would
        # otherwise be a Function output and a saved variable, about 1 us apiece.
        ctx.save_for_backward(*values, *outputs[:returned])
        ctx.intermediates = outputs[returned:]
        return outputs[:returned]

    @staticmethod
    def backward(ctx, *upstream: torch.Tensor):
        top = ctx.top
        if not any(ctx.needs_input_grad[1:]):
            return (None,) * (len(top.inputs) + 1)
        return (None, *top._backward(ctx, *upstream[: len(top.outputs)]))


def _plain(values: list[torch.Tensor]) -> bool:
    """Ordinary CPU/CUDA tensors (no fake, functional or other subclass mode tracing them)."""
    return all(type(v) is torch.Tensor or type(v) is torch.nn.Parameter for v in values) \
        and not torch._C._is_any_autocast_enabled()


def _wide_backward(op: Op) -> bool:
    """Whether to recompute wide intermediates (attention's scores) in the backward: only
    when the C backend has a template that fuses that recomputation (the flash backward);
    elsewhere recomputing a reduction would cost a whole pass or a GEMM, so it is saved."""
    return whole_op_template(derive_grad(op, recompute_wide=True).op)


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def to_torch(op_or_path, backend: str = "auto", target: str = "host") -> TorchOp:
    """A differentiable PyTorch function for an ODL op (object, path or library name).

    backend: "auto" (compiled C where the C backend emits the op, else the reference),
    "c", "triton" (interpreter without a GPU) or "reference".
    """

    op = load_any(op_or_path)
    key = f"{format_op(op)}|{backend}|{target}"
    if key not in _REGISTERED:
        _REGISTERED[key] = TorchOp(op, backend, target)
    return _REGISTERED[key]
