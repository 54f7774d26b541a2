"""Build a PlannedGraph: run the compiled graph once, trace every tensor to its storage, plan the
arena, and turn the groups into replay steps (see planned.py for what a step is)."""

from __future__ import annotations

import torch

from uol_core.graph.arena import HUGE_PAGE, Arena
from uol_core.graph.format import tensor_refs
from uol_core.graph.inplace import leaves, same_storage, whole_storage
from uol_core.graph.memory_plan import plan_memory
from uol_core.graph.planned import (
    CallStep,
    CopyStep,
    KernelStep,
    PlannedGraph,
    Ref,
    Root,
    RunStats,
    Segment,
    buffers_of,
)
from uol_core.graph.prepack import Prepacker
from uol_core.graph.siblings import param_value
from uol_core.runtime.native import NativeKernel
from uol_core.runtime.pages import huge_page_mode

# torch nodes that, when they allocate (a reshape of a non-viewable layout, contiguous, clone),
# only copy their one input: they become a planned copy into the arena instead of an allocation
COPY_LIKE = ("reshape", "view", "_unsafe_view", "flatten", "unflatten", "contiguous", "clone",
             "alias", "squeeze", "unsqueeze", "lift_fresh_copy")


class Recorder:
    """One traced run of a compiled graph."""

    def __init__(self, compiled) -> None:
        self.compiled, self.graph = compiled, compiled.plan.graph
        self.roots: list[Root] = []
        self.by_storage: dict[int, int] = {}
        self.base: dict[int, int] = {}
        self.whole: dict[int, torch.Tensor] = {}
        self.group_refs: dict[str, dict[str, Ref]] = {}  # group -> tensor it writes -> where
        self.values: dict[str, object] = {}
        self.keep: list[torch.Tensor] = []  # holds traced storages, so no address is reused
        self.specs: list[tuple] = []
        self.views_removed = 0
        self.prepacker = Prepacker()

    # ------------------------------------------------------------ storages and references

    @property
    def step(self) -> int:
        return len(self.specs)

    def register(self, t: torch.Tensor, kind: str, name: str) -> int:
        ptr = t.untyped_storage().data_ptr()
        if ptr in self.by_storage:
            return self.by_storage[ptr]
        index = len(self.roots)
        self.roots.append(Root(name, kind, t.untyped_storage().nbytes(), t.dtype, self.step, self.step,
                               t if kind == "fixed" else None))
        self.by_storage[ptr], self.base[index] = index, t.storage_offset()
        # what a private copy of the root holds: an input tensor, or the whole storage
        self.whole[index] = t if kind == "input" else whole_storage(t) if kind == "fixed" else t
        self.keep.append(t)
        return index

    def known(self, t: torch.Tensor) -> bool:
        return t.untyped_storage().data_ptr() in self.by_storage

    def ref(self, t: torch.Tensor) -> Ref:
        """`t` as a reference; marks its root as used at the current step."""
        root = self.by_storage[t.untyped_storage().data_ptr()]
        self.roots[root].last = max(self.roots[root].last, self.step)
        return Ref(root, t.storage_offset() - self.base[root], tuple(t.shape), tuple(t.stride()), t.dtype)

    def refs(self, value):
        if isinstance(value, torch.Tensor):
            return self.ref(value)
        if isinstance(value, (list, tuple)):
            return type(value)(self.refs(v) for v in value)
        if isinstance(value, dict):
            return {k: self.refs(v) for k, v in value.items()}
        return value

    def resolve(self, value):
        if isinstance(value, dict) and set(value) == {"tensor"}:
            return self.values[value["tensor"]]
        if isinstance(value, (list, tuple)):
            return type(value)(self.resolve(v) for v in value)
        if isinstance(value, dict):
            return {k: self.resolve(v) for k, v in value.items()}
        return value

    # ------------------------------------------------------------ groups

    def torch_group(self, group) -> None:
        node = self.graph.node(group.nodes[0])
        args, kwargs = self.resolve(node.args), self.resolve(node.kwargs)
        writes = self.compiled.writes_of(node, args, kwargs)
        if writes:  # the call writes in place: never into the caller's tensors or a parameter
            targets = list(leaves((args, kwargs)))
            for k in writes:
                if self.roots[self.by_storage[targets[k].untyped_storage().data_ptr()]].kind \
                        in ("input", "fixed"):
                    self.privatise(group.name, targets[k])
            args, kwargs = self.resolve(node.args), self.resolve(node.kwargs)
        result = node.fn(*args, **kwargs)
        self.values[node.writes()[0]] = result
        leaves_out = list(_leaves(result))
        fresh = [(path, t) for path, t in leaves_out if not self.known(t)]
        if not fresh and not writes:  # a view of known storages: a strided reference, no step
            self.views_removed += 1
            return
        ins = [self.values[t] for t in tensor_refs([node.args, node.kwargs])]
        name = node.source.rsplit(".", 1)[-1].split(":")[-1]
        if (not writes and name in COPY_LIKE and len(fresh) == 1 and len(ins) == 1
                and isinstance(ins[0], torch.Tensor) and fresh[0][0] == ()
                and fresh[0][1].is_contiguous() and fresh[0][1].numel() == ins[0].numel()):
            src = self.ref(ins[0])
            self.register(fresh[0][1], "arena", node.writes()[0])
            self.specs.append(("copy", group.name, src, self.ref(fresh[0][1])))
            return
        call_args, call_kwargs = self.refs(args), self.refs(kwargs)
        binds = [(path, self.register(t, "dynamic", node.writes()[0])) for path, t in fresh]
        self.specs.append(("call", group.name, node.fn, call_args, call_kwargs, binds))

    def privatise(self, group: str, tensor: torch.Tensor) -> None:
        """A copy of the input or parameter storage under `tensor` in the arena, made by a copy
        step here; every value on that storage is re-pointed at the copy, so the in-place call
        and every later reader use it and the caller's tensor or the weight stays as it was."""
        root = self.by_storage[tensor.untyped_storage().data_ptr()]
        whole = self.whole[root]
        copy = whole.clone(memory_format=torch.contiguous_format)
        src = self.ref(whole)
        self.register(copy, "arena", f"{self.roots[root].name}.private")
        self.specs.append(("copy", group, src, self.ref(copy)))
        self.values = {name: _repoint(value, whole, copy) for name, value in self.values.items()}

    def note_outputs(self, group) -> None:
        """Where the tensors `group` writes live, for a replay checked step by step (their roots'
        lifetimes are not extended: a check reads them right after the group's step)."""
        names = self.graph.node(group.nodes[0]).writes() if group.kind == "torch" \
            else list(group.outputs.values())
        refs = {}
        for name in names:
            t = self.values.get(name)
            if isinstance(t, torch.Tensor) and self.known(t):
                root = self.by_storage[t.untyped_storage().data_ptr()]
                refs[name] = Ref(root, t.storage_offset() - self.base[root], tuple(t.shape),
                                 tuple(t.stride()), t.dtype)
        self.group_refs[group.name] = refs

    def odl_group(self, group) -> None:
        route = self.compiled.routes[group.name]
        inputs = {k: self.values[v] for k, v in group.inputs.items()}
        native, kernel_inputs = None, inputs
        if route.kernel is not None and route.engine == "c":
            native = route.kernel.native_for({k: tuple(t.shape) for k, t in inputs.items()})
            if getattr(self.compiled, "prepack", False) and hasattr(native, "fn"):
                native, kernel_inputs = self._prepacked(group, route, native, inputs)
        if native is None or not hasattr(native, "fn") or not self._kernel(group, native, kernel_inputs):
            self._call(group, route, inputs)

    def _prepacked(self, group, route, native, inputs: dict) -> tuple:
        """The kernel reading its constant B packed once (prepack.py), and its inputs with B
        replaced by the packed panels (a parameter root of their own); as given otherwise."""
        variant = self.prepacker.variant(group.name, route, inputs, self.constant)
        if variant is None:
            return native, inputs
        packed_native, packed_inputs, packed = variant
        if not self.known(packed):
            self.register(packed, "fixed", f"{group.name}.packed")
        return packed_native, packed_inputs

    def constant(self, t: torch.Tensor) -> bool:
        """Whether `t` lies on a parameter's storage (not a private copy of one)."""
        return self.known(t) and self.roots[self.by_storage[t.untyped_storage().data_ptr()]].kind == "fixed"

    def _kernel(self, group, native, inputs: dict) -> bool:
        """The group as a C kernel step (False when its arguments do not fit one)."""

        strided = isinstance(native, NativeKernel)  # the GEMM entry honours argument strides
        args = native.launch_args()
        for name, shape, dtype in args:
            t = inputs.get(name)
            if t is not None and (t.dtype != dtype or tuple(t.shape) != tuple(shape)):
                return False
        tensors = {}
        for name, _, _ in args:
            if name in inputs:
                t = inputs[name]
                if not strided and not t.is_contiguous():
                    src, t = self.ref(t), t.contiguous()
                    self.register(t, "arena", f"{group.name}.{name}")
                    self.specs.append(("copy", group.name, src, self.ref(t)))
                tensors[name] = t
        outs = {name: torch.empty(shape, dtype=dtype) for name, shape, dtype in args if name not in inputs}
        refs = []
        for name, _, _ in args:
            if name in outs:
                self.register(outs[name], "arena", f"{group.name}.{name}")
            refs.append(self.ref(tensors.get(name, outs.get(name))))
        if strided:
            native({**tensors, **outs})
        else:
            native.run(tensors, outs)
        self.specs.append(("kernel", group.name, native.fn, refs))
        for k, v in group.outputs.items():
            self.values[v] = outs[k]
        return True

    def _call(self, group, route, inputs: dict) -> None:
        result = route.run(inputs)
        refs = self.refs(inputs)
        binds = []
        for k, v in group.outputs.items():
            self.values[v] = result[k]
            if not self.known(result[k]):
                binds.append(((k,), self.register(result[k], "dynamic", v)))
        self.specs.append(("call", group.name, lambda tensors, run=route.run: run(tensors),
                           [refs], {}, binds))

    # ------------------------------------------------------------ the whole run

    def record(self, env: dict[str, torch.Tensor]) -> PlannedGraph:
        graph = self.graph
        params = {name: env[name] for name in graph.params if name in env}
        fixed = {name: param_value(graph, self.compiled.plan.derived, name, env)
                 for name in graph.params}
        for name, t in fixed.items():
            self.register(t, "fixed", name)
        inputs = {}
        for name in graph.inputs:
            t = env[name].contiguous()
            inputs[name] = self.register(t, "input", name)
            self.values[name] = t
        self.values.update(fixed)
        with torch.no_grad():
            for group in self.compiled.plan.groups:
                (self.torch_group if group.kind == "torch" else self.odl_group)(group)
                self.note_outputs(group)
        outputs = {}
        for name in graph.outputs:
            ref = self.ref(self.values[name])
            if self.roots[ref.root].kind == "arena":
                self.roots[ref.root].kind = "output"
            outputs[name] = ref
        return self.build(inputs, params, outputs)

    def build(self, inputs, params, outputs) -> PlannedGraph:
        memory = plan_memory(buffers_of(self.roots))
        arena = Arena(memory.arena_bytes)
        for root in self.roots:
            if root.kind == "arena":
                root.anchor = arena.view(memory.offsets[root.name], root.nbytes, root.dtype)
        patches: dict[int, list] = {}
        steps: list = []
        run: list[KernelStep] = []
        counts = {"kernel": 0, "copy": 0, "call": 0}
        for spec in self.specs:
            counts[spec[0]] += 1
            if spec[0] == "kernel":
                step = KernelStep(spec[1], spec[2], spec[3])
                for slot, ref in enumerate(step.refs):
                    patches.setdefault(ref.root, []).append((step.ptrs, slot, ref.byte_offset()))
                run.append(step)
                continue
            if run:
                steps.append(Segment(run))
                run = []
            steps.append(CopyStep(*spec[1:]) if spec[0] == "copy" else CallStep(*spec[1:]))
        if run:
            steps.append(Segment(run))
        huge = "yes" if arena.huge_pages else "no (arena under 2 MiB)" \
            if memory.arena_bytes < HUGE_PAGE else f"no (transparent huge pages: {huge_page_mode()})"
        stats = RunStats(memory, counts["kernel"], sum(isinstance(s, Segment) for s in steps),
                         counts["copy"], counts["call"], self.views_removed, huge)
        stats.prepacked = self.prepacker.to_dict()
        planned = PlannedGraph(self.roots, steps, patches, inputs, params, outputs, stats, arena)
        planned.group_refs = self.group_refs
        planned.prepacker = self.prepacker
        return planned


def _repoint(value, whole: torch.Tensor, copy: torch.Tensor):
    """`value` (nested) with every tensor on `whole`'s storage moved to the same window of
    `copy`, a contiguous copy of `whole`."""
    if isinstance(value, torch.Tensor):
        if not same_storage(value, whole):
            return value
        start = value.storage_offset() - whole.storage_offset()
        return copy.as_strided(tuple(value.shape), tuple(value.stride()), copy.storage_offset() + start)
    if isinstance(value, (list, tuple)):
        return type(value)(_repoint(v, whole, copy) for v in value)
    return value


def _leaves(value, path=()):
    if isinstance(value, torch.Tensor):
        yield path, value
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _leaves(v, (*path, i))


def plan_run(compiled, env: dict[str, torch.Tensor]) -> PlannedGraph:
    """The planned replay of `compiled` for the shapes of `env` (inputs and parameters)."""
    return Recorder(compiled).record(env)
