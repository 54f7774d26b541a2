"""Constant weights packed once: a GEMM group whose B operand is a parameter of the graph runs the
kernel variant that reads B already in its panel layout (backends/c/gemm/prepacked.py), packed
when the planned run is recorded instead of on every call.

Never stale: a packed copy remembers the version counter of the tensor it was packed from
(torch bumps it on every in-place write) and is packed again, into the same buffer, on the
first call after a change. An imported graph's parameters are computed from its module's
tensors at import (a linear's weight transposed, batch norms folded into convolutions, sibling
projections concatenated); `ModuleConstants` watches the module's parameters and buffers the
same way and, when one changed in place, recomputes the graph's parameters from the module
(the import again) and writes the new values into the tensors the kernels read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

import torch

from uol_core.acg.config import TileConfig
from uol_core.backends import get_backend
from uol_core.backends.c.conv import prepacked as conv
from uol_core.backends.c.gemm.prepacked import emit_prepacked, layout_key, pack_b, prepack_refusal
from uol_core.graph.export_import import import_model
from uol_core.graph.format import GraphError


@dataclass
class PackedWeight:
    """One constant B packed for one layout (several groups may share it)."""

    source: torch.Tensor  # the tensor the kernel would have read (a parameter of the graph)
    packed: torch.Tensor  # the panels, what the kernel variant reads
    pack: Callable[[torch.Tensor], torch.Tensor]
    version: int
    groups: list[str] = field(default_factory=list)
    repacks: int = 0

    @property
    def nbytes(self) -> int:
        return self.packed.numel() * self.packed.element_size()

    def refresh(self) -> bool:
        """Pack again if the source was written since it was packed; whether it was."""
        version = self.source._version
        if version == self.version:
            return False
        self.packed.copy_(self.pack(self.source))
        self.version, self.repacks = version, self.repacks + 1
        return True


class Prepacker:
    """The packed weights of one recorded run, shared by layout: (source storage, offset,
    shape, strides, the layout's K, N, KC, NR and orientation)."""

    def __init__(self) -> None:
        self.weights: list[PackedWeight] = []
        self.refusals: dict[str, str] = {}  # group -> why its B is packed per call
        self._by_key: dict[tuple, PackedWeight] = {}
        self._variants: dict[tuple, object] = {}

    @property
    def nbytes(self) -> int:
        return sum(w.nbytes for w in self.weights)

    def variant(self, group: str, route, inputs: dict[str, torch.Tensor],
                constant: Callable[[torch.Tensor], bool]):
        """(the prepacked kernel, `inputs` with B replaced by a view of its panels, the packed
        tensor) for a C GEMM group whose B is `constant`; None when the group has no such B."""

        kernel = route.kernel
        shapes = {k: tuple(t.shape) for k, t in inputs.items()}
        kernel.native_for(shapes)  # binds the sizes (built already: the caller holds it)
        if kernel.kernel_source.meta.get("cross"):
            return None
        backend = get_backend(kernel.backend, kernel.target)
        plan = backend.plan(kernel.op, kernel.sizes, kernel.target)
        if plan.kind != "gemm":  # the conv template's filter (backends/c/conv/prepacked.py)
            return self._conv_variant(group, kernel, backend, plan, inputs, constant)
        gemm, cfg = plan.detail, TileConfig.from_config(kernel.config)
        operand = gemm.rhs.tensor
        weight = inputs.get(operand)
        if weight is None or weight.dtype != torch.float32 or not constant(weight):
            return None
        why = prepack_refusal(gemm, cfg)
        if why:
            self.refusals[group] = why
            return None
        key = (weight.untyped_storage().data_ptr(), weight.storage_offset(), tuple(weight.shape),
               weight.stride(), layout_key(gemm, cfg))
        entry = self._by_key.get(key)
        if entry is None:
            def pack(t, gemm=gemm, cfg=cfg):
                return pack_b(t, gemm, cfg)
            entry = PackedWeight(weight, pack(weight), pack, weight._version)
            self._by_key[key] = entry
            self.weights.append(entry)
        entry.groups.append(group)
        native = self._native(kernel, backend, plan, cfg)
        view = entry.packed.as_strided(tuple(weight.shape), _dense_strides(weight.shape))
        return native, {**inputs, operand: view}, entry.packed

    def _native(self, kernel, backend, plan, cfg):
        key = (id(kernel), tuple(sorted(kernel.sizes.items())), cfg.key())
        if key not in self._variants:
            self._variants[key] = backend.load(emit_prepacked(plan.detail, cfg, plan.target), plan)
        return self._variants[key]

    def _conv_variant(self, group: str, kernel, backend, plan, inputs: dict[str, torch.Tensor],
                      constant: Callable[[torch.Tensor], bool]):
        """`variant` for a conv template kernel whose filter is `constant`: the filter's MR-row
        panels packed once, read through the filter's argument."""

        src = kernel.kernel_source
        panels = conv.panels_of(src)
        weight = inputs.get(panels["filter"]) if panels else None
        if weight is None or weight.dtype != torch.float32 or not constant(weight):
            return None
        why = conv.prepack_refusal(kernel.op, src)
        if why:
            self.refusals[group] = why
            return None
        key = (weight.untyped_storage().data_ptr(), weight.storage_offset(), tuple(weight.shape),
               weight.stride(), conv.layout_key(src))
        entry = self._by_key.get(key)
        if entry is None:
            def pack(t, src=src):
                return conv.pack_filter(t, src)
            entry = PackedWeight(weight, pack(weight), pack, weight._version)
            self._by_key[key] = entry
            self.weights.append(entry)
        entry.groups.append(group)
        variant_key = (id(kernel), tuple(sorted(kernel.sizes.items())), "conv filter")
        if variant_key not in self._variants:
            self._variants[variant_key] = backend.load(
                conv.emit_prepacked(kernel.op, kernel.sizes, kernel.target, kernel.config), plan)
        view = entry.packed.as_strided(tuple(weight.shape), _dense_strides(weight.shape))
        return self._variants[variant_key], {**inputs, panels["filter"]: view}, entry.packed

    def refresh(self) -> int:
        """Repack every weight written since it was packed; how many were."""
        return sum(w.refresh() for w in self.weights)

    def to_dict(self) -> dict:
        return {"packed_weights": len(self.weights), "packed_bytes": self.nbytes,
                "groups": sorted(g for w in self.weights for g in w.groups),
                "per_call_packing": dict(self.refusals)}


def _dense_strides(shape) -> tuple[int, ...]:
    strides, step = [], 1
    for size in reversed(tuple(shape)):
        strides.append(step)
        step *= max(1, size)
    return tuple(reversed(strides))


class ModuleConstants:
    """The version counters of an imported graph's module tensors (parameters and buffers),
    taken when the graph was compiled; `refresh` brings the graph's parameters up to date."""

    def __init__(self, module) -> None:
        tensors = [] if module is None else list(chain(module.parameters(), module.buffers()))
        self.tensors = tensors
        self.versions = [t._version for t in tensors]

    def changed(self) -> bool:
        return any(t._version != v for t, v in zip(self.tensors, self.versions))

    def settle(self) -> None:
        """Take the current versions as seen (after a write that changed no value: the
        verification restoring the module's buffers)."""
        self.versions = [t._version for t in self.tensors]

    def refresh(self, compiled, env: dict[str, torch.Tensor]) -> list[str]:
        """Recompute the graph's parameters from the module (imported again at the shapes of
        `env`), write the ones that differ into the tensors the runs read, rebuild derived
        ones (concatenated sibling weights); returns the names written."""

        graph = compiled.source
        fresh = import_model(graph.module, *(env[n] for n in graph.inputs), name=graph.name)
        # the graph's own values may hold its example inputs too (a zoo graph): compare the
        # module's constants only
        if set(fresh.values) - set(graph.inputs) != set(graph.values) - set(graph.inputs):
            raise GraphError(f"{graph.name}: its parameters no longer match the module's (a "
                             "parameter was added, removed or reshaped): import it again")
        written = [name for name, value in fresh.values.items()
                   if name not in graph.inputs
                   and _write(graph.values[name], value, name, graph.name)]
        values = compiled.plan.graph.values
        for name, (dim, parts) in compiled.plan.derived.items():
            if _write(values[name], torch.cat([values[p] for p in parts], dim), name, graph.name):
                written.append(name)
        self.settle()
        return written


def _write(old: torch.Tensor, new: torch.Tensor, name: str, graph: str) -> bool:
    if old.shape != new.shape or old.dtype != new.dtype:
        raise GraphError(f"{graph}: parameter {name} is now {tuple(new.shape)} {new.dtype}, "
                         f"was {tuple(old.shape)} {old.dtype}: import the module again")
    if old.data_ptr() == new.data_ptr() or torch.equal(old, new):
        return False  # the same storage as the module's tensor, or unchanged
    with torch.no_grad():
        old.copy_(new)
    return True


__all__ = ["ModuleConstants", "PackedWeight", "Prepacker"]
