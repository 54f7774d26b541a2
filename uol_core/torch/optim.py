"""Optimizers whose update is one ODL op written over the parameters (entry points `SGD`,
`AdamW`).

torch's default optimizers on the CPU update one tensor at a time with several ops each
(SGD with momentum: 3 per parameter, AdamW: about 10), each a dispatcher call and a pass over
memory. Here the update is a library op (`sgd_momentum`, `adamw`) whose outputs alias the
parameter and its state (ODL `aliases`), so its kernel reads and writes each element once, in
place; one launch plan runs it over every parameter of a group in one foreign call.

The math, the hyper-parameters and the state (`momentum_buffer`; `step`, `exp_avg`,
`exp_avg_sq`) are torch's, so state dicts move between these and torch's optimizers. Each
parameter is updated through a [rows, cols] view (`rows_view`): the generic C path fuses the
op's statements into one pass per row and splits rows across threads. Parameters off the CPU,
non-contiguous or not float32 take the same op through its runner (Triton or the reference)
and are copied back.
"""

from __future__ import annotations

import abc
import math
import struct
from collections.abc import Iterable, Sequence

import torch

from uol_core.odl.ir import retyped
from uol_core.ops import load_op
from uol_core.runtime.dispatch import OpRunner
from uol_core.runtime.launch import LaunchPlan, RenamedStep
from uol_core.runtime.reference import TORCH_DTYPES

_WIDTHS = (1024, 512, 256, 128, 64, 32, 16)  # row lengths tried, longest first


def rows_view(numel: int) -> tuple[int, int]:
    """The [rows, cols] view a parameter is updated through: the longest row of _WIDTHS that
    divides it (few distinct shapes, so few kernels to build), else one row."""
    cols = next((w for w in _WIDTHS if numel % w == 0 and numel >= w), max(1, numel))
    return numel // cols, cols


class _PlannedUpdate:
    """One op's update over a fixed list of parameters as one launch plan. Tensor inputs are
    named `<name><k>` for parameter k. The scalars, SHARED (one value for the group) then OWN
    (a set per parameter: AdamW's bias corrections follow each parameter's step), live in one
    float32 buffer bound to the plan; `set_scalars` writes them all with one struct.pack_into
    (no torch or numpy op: a step runs with those libraries' code out of the caches)."""

    def __init__(self, runner: OpRunner, shapes: Sequence[tuple[int, int]],
                 tensor_names: Sequence[str], shared: Sequence[str], own: Sequence[str]) -> None:
        op = runner.op
        self._scalars = torch.zeros(len(shared) + len(shapes) * len(own))
        self._bytes = memoryview(self._scalars.numpy()).cast("B")
        self._pack = struct.Struct(f"={self._scalars.numel()}f")
        # 0-d views at fixed addresses, bound to the plan after the tensors: a call passes
        # only the tensors, and the plan the scalars' pointers taken once
        scalars = [self._scalars[j] for j in range(self._scalars.numel())]
        order, steps, outputs, donated = [], [], [], {}
        specs = {n: ((), torch.float32) for n in shared}
        for k, shape in enumerate(shapes):
            meta = {n: torch.empty(shape, device="meta") for n in tensor_names}
            meta.update({n: torch.empty((), device="meta") for n in [*shared, *own]})
            natives = runner.kernel_steps(meta)
            if not natives:
                raise ValueError(f"{op.name} has no C kernel here ({runner.reason})")
            names = {n: f"{n}{k}" for n in [*tensor_names, *own, *(d.name for d in op.outputs)]}
            steps += [RenamedStep(native, names) for native in natives]
            order += [names[n] for n in tensor_names]
            outputs += [names[d.name] for d in op.outputs]
            donated.update({names[out]: names[src] for out, src in op.aliases.items()})
            specs.update({names[n]: (shape, torch.float32) for n in tensor_names})
            specs.update({names[n]: ((), torch.float32) for n in own})
        order += [*shared, *(f"{n}{k}" for k in range(len(shapes)) for n in own)]
        self.plan = LaunchPlan(order, specs, steps, outputs, donated, bound=scalars)

    def set_scalars(self, shared: Sequence[float], own: Sequence[float]) -> None:
        """The group's SHARED values, then every parameter's OWN ones, rounded to float32."""
        self._pack.pack_into(self._bytes, 0, *shared, *own)

    def __call__(self, tensors: list[torch.Tensor]) -> None:
        self.plan(tensors)


class _UolOptimizer(torch.optim.Optimizer, abc.ABC):
    """An optimizer whose step is the library op OP over (param, grad, *STATE) per parameter;
    its scalars are SHARED (from the group's settings) then OWN (per parameter)."""

    OP = ""
    STATE: tuple[str, ...] = ()  # state tensors, in the op's input order after P and G
    SHARED: tuple[str, ...] = ()
    OWN: tuple[str, ...] = ()

    def __init__(self, params: Iterable, defaults: dict, backend: str = "auto") -> None:
        super().__init__(params, defaults)
        self.backend = backend
        self._runner = OpRunner(load_op(self.OP), backend, "host")
        self._runners: dict[tuple, OpRunner] = {}  # (dtype, device type) of the fallback
        # per list of parameters with gradients: (plan, argument list, tensors written)
        self._groups: dict[tuple, tuple] = {}
        self._bound: dict[int, tuple] = {}  # per group: the cache entry its last step used

    @abc.abstractmethod
    def shared_values(self, group: dict) -> tuple[float, ...]:
        """The SHARED scalars for a group's settings (float64, rounded to float32 once);
        each optimizer says its own."""

    def own_values(self, group: dict, params: Sequence[torch.Tensor],
                   fresh: bool) -> tuple[float, ...]:
        """The OWN scalars for this step, parameter after parameter (len(params) * len(OWN));
        `fresh`: the parameters differ from the group's last step's, so re-read any state kept
        in Python."""
        return ()

    def _state(self, p: torch.Tensor) -> list[torch.Tensor]:
        state = self.state[p]
        for name in self.STATE:
            if state.get(name) is None:
                state[name] = torch.zeros_like(p, memory_format=torch.contiguous_format)
        return [state[name] for name in self.STATE]

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._groups.clear()  # the state tensors the cached argument lists held are replaced
        self._bound.clear()

    def step(self, closure=None):
        """One update of every parameter that has a gradient; returns the closure's loss.
        (No `torch.no_grad` around it: the planned path runs no torch op that records; the
        paths that copy into parameters take it themselves.)"""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            # one pass over the parameters (a step runs after the backward pass, with this
            # Python's objects out of the caches: every touch of a tensor counts)
            params, grads, key = [], [], []
            for p in group["params"]:
                g = p.grad
                if g is not None:
                    params.append(p)
                    grads.append(g)
                    # the cached lists hold the tensors, so ids stay theirs; shape, type and
                    # device are in the key because a plan passes raw pointers: a parameter
                    # moved or resized since (`p.data = ...`, `model.double()`) gets a new
                    # plan or the runner, never a kernel built for other bytes
                    key.append((id(p), p.shape, p.dtype, p.device))
            if not params:
                continue
            key = tuple(key)
            cached = self._groups.get(key)
            if cached is None:
                cached = self._groups[key] = self._prepare(tuple(params))
            plan, flat, written = cached
            shared = self.shared_values(group)
            own = self.own_values(group, params, self._bound.get(id(group)) is not cached)
            self._bound[id(group)] = cached
            if plan is None:
                self._run_each(params, shared, own)
                continue
            if any(g.layout is not torch.strided for g in grads):
                raise RuntimeError(f"{type(self).__name__} does not take sparse gradients")
            flat[1::2 + len(self.STATE)] = grads
            plan.set_scalars(shared, own)
            plan(flat)
            # the kernel wrote through pointers: tell autograd the tensors changed, as an
            # in-place torch op would (a graph that saved one then refuses a stale backward)
            torch.autograd.graph.increment_version(written)
        return loss

    @torch.no_grad()
    def _prepare(self, params: tuple[torch.Tensor, ...]) -> tuple:
        """(plan, argument list with the gradients' places empty, tensors written) for these
        parameters; the plan is None when some parameter or state tensor is not a contiguous
        float32 CPU tensor, or the op has no C kernel here."""
        rows = [[p, None, *self._state(p)] for p in params]
        written = [t for row in rows for t in row[:1] + row[2:]]
        plan = None
        if all(t.dtype == torch.float32 and t.device.type == "cpu" and t.is_contiguous()
               for t in written):
            try:
                plan = _PlannedUpdate(self._runner, [rows_view(p.numel()) for p in params],
                                      ["P", "G", *self._state_inputs()], self.SHARED, self.OWN)
            except ValueError:
                plan = None
        return plan, [t for row in rows for t in row], written

    def _state_inputs(self) -> list[str]:
        return [d.name for d in self._runner.op.inputs[2:2 + len(self.STATE)]]

    def _runner_for(self, p: torch.Tensor) -> OpRunner:
        """The op's runner for a parameter off the planned path: in its float type (an f64
        model updates in f64), on Triton for a GPU tensor unless a backend was named."""
        key = (p.dtype, p.device.type)
        if key not in self._runners:
            op = self._runner.op
            if p.dtype != torch.float32:
                op = retyped(op, next(t for t, d in TORCH_DTYPES.items() if d == p.dtype))
            backend = "triton" if p.device.type != "cpu" and self.backend == "auto" \
                else self.backend
            self._runners[key] = OpRunner(op, backend, "host")
        return self._runners[key]

    @torch.no_grad()
    def _run_each(self, params: Sequence[torch.Tensor], shared: tuple, own) -> None:
        """The same op per parameter through its runner (Triton, the reference), copied back."""
        names = ["P", "G", *self._state_inputs()]
        for k, p in enumerate(params):
            runner = self._runner_for(p)
            row = [p, p.grad, *self._state(p)]
            feed = {n: t.reshape(rows_view(p.numel())) for n, t in zip(names, row)}
            count = len(self.OWN)
            values = [*shared, *own[k * count:(k + 1) * count]]
            feed.update({n: torch.tensor(float(v), dtype=p.dtype, device=p.device)
                         for n, v in zip(self.SHARED + self.OWN, values)})
            outs = runner(feed)
            for out, source in runner.op.aliases.items():
                row[names.index(source)].copy_(outs[out].reshape(p.shape))


class SGD(_UolOptimizer):
    """torch.optim.SGD with momentum (dampening 0, not Nesterov) as one UOL kernel per step."""

    OP = "sgd_momentum"
    STATE = ("momentum_buffer",)
    SHARED = ("lr", "momentum", "decay")

    def __init__(self, params: Iterable, lr: float = 1e-3, momentum: float = 0.9,
                 weight_decay: float = 0.0, backend: str = "auto") -> None:
        if momentum <= 0:
            raise ValueError("UOL's SGD keeps a momentum buffer: give momentum > 0 "
                             "(torch.optim.SGD covers plain SGD)")
        super().__init__(params, {"lr": lr, "momentum": momentum, "dampening": 0.0,
                                  "weight_decay": weight_decay, "nesterov": False,
                                  "maximize": False}, backend)

    def shared_values(self, group: dict) -> tuple[float, ...]:
        return group["lr"], group["momentum"], group["weight_decay"]


class AdamW(_UolOptimizer):
    """torch.optim.AdamW (not AMSGrad) as one UOL kernel per step. `step` is kept per
    parameter as torch keeps it (a tensor in the state); a Python copy of the steps feeds the
    bias corrections, read again from the state when the parameters stepped change."""

    OP = "adamw"
    STATE = ("exp_avg", "exp_avg_sq")
    SHARED = ("shrink", "lerp", "beta2", "one_minus_beta2", "eps")
    OWN = ("step_size", "root_correction")

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8, weight_decay: float = 1e-2, backend: str = "auto") -> None:
        super().__init__(params, {"lr": lr, "betas": betas, "eps": eps,
                                  "weight_decay": weight_decay, "amsgrad": False,
                                  "maximize": False}, backend)
        self._steps: dict[int, tuple] = {}  # per group: (steps, their bytes, their struct)

    def shared_values(self, group: dict) -> tuple[float, ...]:
        # float64 as torch computes them from Python floats; the plan rounds them once
        (beta1, beta2), lr = group["betas"], group["lr"]
        return 1 - lr * group["weight_decay"], 1 - beta1, beta2, 1 - beta2, group["eps"]

    def own_values(self, group: dict, params: Sequence[torch.Tensor],
                   fresh: bool) -> tuple[float, ...]:
        if fresh:
            # each parameter's `step` (a float32 tensor, as torch keeps it) becomes a view
            # of one buffer, read and counted with one struct call each way
            steps = torch.zeros(len(params))
            for k, p in enumerate(params):
                old = self.state[p].get("step")
                steps[k] = float(old) if old is not None else 0.0
                self.state[p]["step"] = steps[k]
            self._steps[id(group)] = (steps, memoryview(steps.numpy()).cast("B"),
                                      struct.Struct(f"={len(params)}f"))
        _, view, pack = self._steps[id(group)]
        t = [n + 1.0 for n in pack.unpack_from(view)]  # read back: a step set in place counts
        pack.pack_into(view, 0, *t)
        (beta1, beta2), lr = group["betas"], group["lr"]
        # in double, as torch computes the corrections; the usual case: every step equal
        if t[0] == t[-1] and len(set(t)) == 1:
            return (lr / (1 - beta1 ** t[0]), math.sqrt(1 - beta2 ** t[0])) * len(t)
        return tuple(v for n in t for v in (lr / (1 - beta1 ** n), math.sqrt(1 - beta2 ** n)))
