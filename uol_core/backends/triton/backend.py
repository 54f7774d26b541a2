"""The Triton backend's row of the registry: the GPU tile space (backends/triton/space.py), the row,
matmul, flash and generic kernels, run on a GPU when there is one, else interpreted."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from uol_core.backends.base import KernelSource, into_given
from uol_core.backends.contract import Choice, Plan, Tuned, generator_hash, source_hash

EXTRA_KNOBS = ("force_generic", "MAX_BLOCK_C")  # accepted by the emitter beyond its defaults
# What the Triton kernels are generated from (paths from uol_core/): every file of its package,
# the emission limits its emitters read and the shared plans; Triton compiles them itself (its
# own cache key holds its flags)
GENERATOR_FILES = ("backends/triton/**/*.py", "backends/base.py", "backends/emit_limits.py",
                   "plans/**/*.py")


class TritonKernel:
    """Emitted Triton source loaded for one op: runs on named tensors, returns outputs by name."""

    def __init__(self, source: KernelSource, op: Any) -> None:
        # loaded when asked for: importing the registry row stays cheap
        from pathlib import Path

        from uol_core.runtime.triton_runner import INTERPRETED_NOTE, gpu_available, load_module

        self.source, self.op = source, op
        # import now, so a broken module fails here and not mid-run
        self.path = Path(load_module(source).__file__)
        # why a wall-clock time of this kernel means nothing ('' when it does)
        self.timing_note = "" if gpu_available() else INTERPRETED_NOTE

    def run_with(self, tensors: Mapping, out: Any = None) -> dict:
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.runtime.triton_runner import run_triton

        outs = run_triton(self.source, self.op, dict(tensors))
        outs = {name: value.cpu() if value.device.type != "cpu" else value
                for name, value in outs.items()}
        return into_given(outs, out, self.source)


    def bench(self, tensors: Mapping) -> list[float]:
        """Seconds per call (the median of triton.testing.do_bench) on a GPU; [] interpreted."""
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.runtime.triton_runner import bench_triton

        timing = bench_triton(self.source, self.op, dict(tensors))
        return [timing["median_ms"] / 1e3] if timing.get("median_ms") else []


class TritonBackend:
    """Triton kernels; without a GPU they run under TRITON_INTERPRET=1 (correct, slow)."""

    name = "triton"
    lang = "triton"
    label = "Triton"  # how user interfaces name it
    knobs_named_in_source = True  # block sizes are constexpr names in the kernel text

    def plan(self, op: Any, sizes: Mapping[str, int], target: Any) -> Plan:
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.acg.config import resolve_target
        from uol_core.odl.overflow import INT32, check_index_arithmetic
        from uol_core.odl.patterns import classify

        if set(op.dims) <= set(sizes):  # the kernels' offsets and indices are int32
            check_index_arithmetic(op, sizes, INT32)
        return Plan(op, dict(sizes), resolve_target(target), classify(op).kind)

    def space(self, op: Any, sizes: Mapping[str, int], target: Any):
        return gpu_space_of(self.plan(op, sizes, target))

    def choose(self, plan: Plan, request: Any = None) -> Choice:
        """The cost model's best legal config on a GPU target; on any other target (interpreted,
        where time means nothing) the legal config closest to the emitter's defaults. A request
        ('BLOCK_M=64' or a dict) goes on top; a `Tuned` request keeps the pick (tuning needs a GPU)."""
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.acg.space_core import parse_key
        from uol_core.backends.triton import DEFAULTS
        from uol_core.backends.triton.space import rank

        space = gpu_space_of(plan)
        notes = list(space.notes)
        if getattr(plan.target, "kind", "") == "gpu":
            ranked = [c for c, _ in rank(space, plan.target)]
        else:
            ranked = sorted(space.configs, key=lambda c: sum(
                DEFAULTS.get(k, v) != v for k, v in c.items()))
        pick = dict(ranked[0]) if ranked else {}
        if isinstance(request, Tuned):
            notes.append("no Triton tuning records here: the model's pick is used")
            request = None
        if isinstance(request, str):
            request = parse_key(request)
        unknown = sorted(set(request or {}) - set(DEFAULTS) - set(EXTRA_KNOBS))
        if unknown:
            raise ValueError(f"unknown Triton knob(s) {', '.join(unknown)}; known: "
                             f"{', '.join(DEFAULTS)}")
        # every knob the emitter reads, the space's own solved, the rest at the emitter's value
        return Choice({**DEFAULTS, **pick, **dict(request or {})}, space, None, notes)

    def emit(self, plan: Plan, config: Any) -> KernelSource:
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.backends.triton import emit

        return emit(plan.op, dict(config or {}), plan.target)

    def load(self, source: KernelSource, plan: Plan) -> TritonKernel:
        return TritonKernel(source, plan.op)

    def hash(self) -> str:
        return "triton-" + generator_hash(GENERATOR_FILES)

    def older_generators(self) -> tuple[str, ...]:
        """The key's generator before `hash` named the plans: templates only, then 'triton'."""
        return ("triton-" + source_hash("triton/**/*.py", "base.py") + "/",)

    def tuning_model(self, plan: Plan, space: Any):
        """The model's pick (`choose`) first, then the space in its order; no predictions."""
        # acg's models load when a tune asks: importing the registry row stays cheap
        from uol_core.acg.space_core import as_mapping
        from uol_core.acg.tuning_models import PickFirst
        from uol_core.odl.cost import op_cost

        return PickFirst(as_mapping(self.choose(plan).config), space.domains,
                         op_cost(plan.op, plan.sizes).flops)

    def tuning_runner(self, plan: Plan, seed: int = 0, **_worker_options: Any):
        """Kernels emitted, loaded, verified and benchmarked in this process (a worker, a
        minimum time or a timeout of the C runner's do not apply)."""
        # the runner loads when a tune asks: importing the registry row stays cheap
        from uol_core.odl.cost import op_cost
        from uol_core.runtime.runners import InProcessRunner

        return InProcessRunner(self, plan, seed, op_cost(plan.op, plan.sizes).flops)


def gpu_space_of(plan: Plan):
    # loaded when asked for: importing the registry row stays cheap
    from uol_core.backends.triton.space import gpu_space

    return gpu_space(plan.op, dict(plan.sizes), plan.target)
