"""Launch plans: an op's C kernels called in order on a list of tensors (entry point `plan_for`).

A training step calls each small kernel thousands of times at the same shapes. The general
path finds the kernel by name and shape, checks every argument and rebuilds the stride array
on every call (tens of microseconds, as long as a 128x256x256 GEMM here). A plan does that
work once: argument slots, output shapes and the strides of contiguous tensors are fixed when
it is made, so a call allocates the outputs and passes pointers, nothing else: one pointer
per tensor, and one foreign call for all its kernels (runtime/driver.py `uol_plan_run`).
"""

from __future__ import annotations

import ctypes
import threading
from array import array
from collections.abc import Mapping, Sequence

import torch

from uol_core.runtime.dispatch import OpRunner
from uol_core.runtime.driver import driver
from uol_core.runtime.pages import fresh_output


class LaunchPlan:
    """Run kernel steps on inputs given in a fixed order; returns the named outputs in order."""

    def __init__(self, inputs: Sequence[str], input_specs: Mapping[str, tuple], steps: list,
                 outputs: Sequence[str], donated: Mapping[str, str] | None = None,
                 bound: Sequence[torch.Tensor] = ()) -> None:
        """`bound`: tensors the plan holds for the last len(bound) inputs (an optimizer's
        scalars, written between calls through views): their pointers are taken once, and a
        call passes only the other inputs."""
        slot = {name: i for i, name in enumerate(inputs)}
        # an output written over a donated input (ODL `aliases`) takes the input's slot: the
        # kernel updates that tensor in place, and the plan returns it
        slot.update({out: slot[source] for out, source in (donated or {}).items()})
        self.names = list(inputs)
        self._donated = sorted({slot[source] for source in (donated or {}).values()})
        self.input_specs = [input_specs[n] for n in inputs]  # (shape, dtype) per input
        self.allocs: list[tuple[tuple, torch.dtype]] = []
        self.steps: list[tuple] = []
        for native in steps:
            args = native.launch_args()
            for name, shape, dtype in args:
                if name not in slot:  # first written here: an output or an intermediate
                    slot[name] = len(inputs) + len(self.allocs)
                    self.allocs.append((tuple(shape), dtype))
            strides = [s for _, shape, _ in args for s in _contiguous_strides(shape)]
            self.steps.append((native.fn, tuple(slot[name] for name, _, _ in args),
                               (ctypes.c_int64 * max(1, len(strides)))(*strides)))
        self.outputs = tuple(slot[name] for name in outputs)
        self._table = _step_table(self.steps)
        # Intermediates between kernels never leave the plan: one set per thread is reused
        # (a fresh one would cost an allocation each, and first-touch page faults when large).
        first = len(inputs)
        self._scratch_slots = [i for i in range(first, first + len(self.allocs))
                               if i not in self.outputs]
        # (slot, shape, dtype): fresh_output decides per size (large ones come from the output
        # pool, on huge pages where the OS grants them)
        self._output_allocs = [(i, shape, dtype) for i in self.outputs if i >= first
                               for shape, dtype in [self.allocs[i - first]]]
        self._local = threading.local()
        if any(not t.is_contiguous() or t.device.type != "cpu" for t in bound):
            raise ValueError("a bound input must be a contiguous CPU tensor")
        self._bound = list(bound)  # held: the pointers below stay theirs
        self._bound_ptrs = array("q", [t.data_ptr() for t in bound])
        self._free = len(inputs) - len(bound)  # inputs passed on each call
        if any(i >= self._free for i in self._donated):
            raise ValueError("an input written in place cannot be bound")

    def __call__(self, values: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        if len(values) != self._free:
            raise ValueError(f"the plan takes {self._free} inputs, got {len(values)}")
        env: list = [v if v.is_contiguous() else v.contiguous() for v in values]
        env.extend(self._bound)
        for i in self._donated:  # a contiguous copy would take the update, not the tensor
            if env[i] is not values[i]:
                raise ValueError(f"input {self.names[i]} is written in place and must be "
                                 "contiguous")
        env.extend(self._scratch())
        for i, shape, dtype in self._output_allocs:
            env[i] = fresh_output(shape, dtype)
        lib = driver()
        if lib is not None:  # the pointers, held until the call returns
            ptrs = array("q", [t.data_ptr() for t in env[:self._free]])
            ptrs.extend(self._bound_ptrs)
            ptrs.extend([t.data_ptr() for t in env[len(self.names):]])
            lib.uol_plan_run(self._table.buffer_info()[0], ptrs.buffer_info()[0])
        else:
            for fn, slots, strides in self.steps:
                ptrs = array("q", [env[i].data_ptr() for i in slots])
                fn(ptrs.buffer_info()[0], strides)
        return [env[i] for i in self.outputs]

    def _scratch(self) -> list:
        """This thread's intermediates, in slot order (None where an output goes)."""
        scratch = getattr(self._local, "tensors", None)
        if scratch is None:
            first = len(self.input_specs)
            scratch = [None] * len(self.allocs)
            for i in self._scratch_slots:
                shape, dtype = self.allocs[i - first]
                scratch[i - first] = torch.empty(shape, dtype=dtype)
            self._local.tensors = scratch
        return scratch


def _step_table(steps: list[tuple]) -> array:
    """The driver's table of `steps` (function, argument slots, strides): the step count, then
    per step the function's address, the strides' address, the argument count and the slots.
    The strides arrays and functions stay referenced by the plan's steps."""
    table = array("q", [len(steps)])
    for fn, slots, strides in steps:
        table.extend((ctypes.cast(fn, ctypes.c_void_p).value, ctypes.addressof(strides),
                      len(slots), *slots))
    return table


def plan_for(runner: OpRunner, tensors: Mapping[str, torch.Tensor],
             order: Sequence[str], donate: bool = False) -> LaunchPlan | None:
    """A plan for `runner` at these tensors' shapes and dtypes, inputs taken in `order`;
    None when a step is not a compiled C kernel (reference or Triton) or a tensor is not on
    the CPU. `donate`: outputs that alias an input are written over it (in place)."""
    if any(t.device.type != "cpu" for t in tensors.values()):
        return None
    steps = runner.kernel_steps(tensors)
    if not steps:
        return None
    for native in steps:  # inputs must already have the dtype each kernel reads
        for name, _, dtype in native.launch_args():
            if name in tensors and tensors[name].dtype != dtype:
                return None
    specs = {n: (tuple(t.shape), t.dtype) for n, t in tensors.items()}
    return LaunchPlan(order, specs, steps, [d.name for d in runner.op.outputs],
                      runner.op.aliases if donate else None)


class RenamedStep:
    """A kernel step whose arguments carry other names, so that one plan can run the same
    kernel on several sets of tensors (an optimizer's update over every parameter)."""

    def __init__(self, native, names: Mapping[str, str]) -> None:
        self.fn = native.fn
        self._args = [(names.get(n, n), shape, dtype) for n, shape, dtype in native.launch_args()]

    def launch_args(self) -> list[tuple[str, tuple, torch.dtype]]:
        return self._args


def _contiguous_strides(shape: Sequence[int]) -> list[int]:
    strides, step = [], 1
    for extent in reversed(tuple(shape)):
        strides.append(step)
        step *= max(1, int(extent))
    return strides[::-1]
