"""Build and call any UOL C kernel on torch tensors of any ODL dtype (inputs made contiguous)."""

from __future__ import annotations

from collections.abc import Mapping

import torch

from uol_core.backends.base import DeclaredArgs, KernelSource
from uol_core.odl.ir import Op
from uol_core.odl.shapes import ShapeError, bind_sizes, shape_of
from uol_core.runtime.build import build
from uol_core.runtime.native import call_entry, load_entry
from uol_core.runtime.pages import fresh_output
from uol_core.runtime.reference import TORCH_DTYPES


class CKernel(DeclaredArgs):
    """A built kernel `void f(void **args, const int64_t *strides)`; args are inputs then outputs."""

    def __init__(self, src: KernelSource, op: Op, sizes: Mapping[str, int]) -> None:
        self.src, self.op, self.sizes = src, op, dict(sizes)
        self.path = build(src)
        self.fn = load_entry(self.path, src.entry)
        # per argument, worked out once: name, torch dtype, shape (each call only checks them)
        self._args = [(name, TORCH_DTYPES[op.tensor(name).dtype], shape_of(op, name, self.sizes))
                      for name in src.meta["args"]]
        self._outputs = [(d.name, TORCH_DTYPES[d.dtype], shape_of(op, d.name, self.sizes))
                         for d in op.outputs]
        outputs = {name for name, _, _ in self._outputs}
        self._launch = [(name, dtype, torch.Size(shape), name in outputs)
                        for name, dtype, shape in self._args]

    def outputs_like(self) -> dict:
        """Output tensors of the declared shapes and dtypes, large ones from the output pool
        (runtime/pages.py), as every other call path of the runtime allocates them."""
        return {name: fresh_output(shape, dtype) for name, dtype, shape in self._outputs}

    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Run on every argument by name, outputs written in place (as a NativeKernel is
        called): an input of another dtype, layout or device is converted for the call, an
        output must be a contiguous CPU tensor of its dtype. One pass, few tensor property reads: a small
        kernel's whole call is a few microseconds, and `.to(dtype).contiguous()` of a tensor
        that needs neither costs 1.6 us."""
        ptrs: list[int] = []
        strides: list[int] = []
        held = []  # converted inputs, alive until the call returns
        for name, dtype, want, output in self._launch:
            t = tensors[name]
            if t.shape != want:
                raise ShapeError(f"{name} has shape {tuple(t.shape)}; this kernel was built for {tuple(want)}")
            if t.dtype is not dtype or not t.is_contiguous() or not t.is_cpu:
                if output:
                    raise ShapeError(f"output {name} must be a contiguous {dtype} tensor on the CPU")
                t = t.to("cpu", dtype).contiguous()  # a C kernel reads host memory only
                held.append(t)
            ptrs.append(t.data_ptr())
            strides += t.stride()
        call_entry(self.fn, ptrs, strides)

    def run(self, tensors: Mapping[str, torch.Tensor],
            out: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Call the kernel; inputs are converted to their declared dtype and made contiguous."""
        outs = dict(out) if out is not None else self.outputs_like()
        self({**tensors, **outs})
        return outs

    def run_with(self, tensors: Mapping[str, torch.Tensor], out=None) -> dict[str, torch.Tensor]:
        """`run` with `out` as compile() takes it: None, one tensor, or a dict by output name."""
        given = dict(out) if isinstance(out, Mapping) else \
            {self.src.meta["outputs"][0]: out} if out is not None else {}
        # only the outputs not given are allocated (a pooled buffer taken and dropped would
        # be one fewer for the next call)
        return self.run(tensors, {name: given.get(name) if given.get(name) is not None
                                  else fresh_output(shape, dtype)
                                  for name, dtype, shape in self._outputs})


def compile_c(op: Op, shapes: Mapping, target=None, config: Mapping | None = None,
              emitter=None) -> CKernel:
    """Emit (best path unless `emitter` is given), build and load the C kernel of `op`; for a
    target of another architecture, an EmulatedKernel (same calls, run under the emulator)."""
    # loaded when a kernel is compiled: importing the loader stays cheap
    from uol_core.backends.c.route import emit_any
    from uol_core.runtime.cross import for_target

    sizes = bind_sizes(op, shapes)
    target = _resolved(target)
    src = for_target((emitter or emit_any)(op, sizes, target, config), target)
    if src.meta.get("cross"):
        # loaded when a kernel is compiled: importing the loader stays cheap
        from uol_core.runtime.emulate import EmulatedKernel

        return EmulatedKernel(src, op, sizes)  # type: ignore[return-value]
    return CKernel(src, op, sizes)


def _resolved(target):
    """The HFL Target of a name (None stays None: the host)."""
    if isinstance(target, str):
        # loaded when a kernel is compiled: importing the loader stays cheap
        from uol_core.acg.config import resolve_target

        return resolve_target(target)
    return target

