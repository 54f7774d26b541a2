"""The C backend's row of the registry: GEMM-family ops get the tile space and the BLIS-style
template, every other op the pattern space and the row, flash, conv, scan or generic templates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from uol_core.backends.base import KernelSource
from uol_core.backends.contract import Choice, Plan, Tuned, generator_hash, source_hash

DEFAULT_TUNE_BUDGET = 8
# What the C kernels are generated from (paths from uol_core/): every file of the C package
# (entry, text toolkit, templates, platform files), the shared plans (the GEMM lowering among
# them) and the fusion they read; `hash()` adds the compile flags.
GENERATOR_FILES = ("backends/c/**/*.py", "backends/base.py", "backends/emit_limits.py",
                   "plans/**/*.py", "acg/fusion.py")


class CBackend:
    """gcc-built C kernels, called through ctypes on torch data pointers."""

    name = "c"
    lang = "c"
    label = "C (gcc, CPU)"  # how user interfaces name it
    # What the runtime asks of a backend beyond the contract (others leave these out):
    # float inputs of another dtype are run by another backend; bf16 only where `declines`
    # finds the bf16 GEMM template (AMX, AVX512-BF16 or widened f32) takes the op
    float_dtypes = ("f32", "bf16")
    splits_contractions = True  # an op with several contractions runs one kernel per group
    native_steps = True  # a call's kernels can be listed (profilers, memory planning)
    worker_jobs = True  # runtime.worker builds, verifies and times its sources in isolation

    def declines(self, op: Any, tensors: Mapping[str, Any]) -> str | None:
        """Why this backend cannot run `op` on these tensors' dtypes (None: it can). bf16 data
        runs only where the op declares it bf16 and the bf16 GEMM template recognises the op;
        every other bf16 op goes to another backend, with this as the reason."""
        # loaded when asked for: importing the registry row stays cheap
        import torch

        from uol_core.backends.c.gemm import bf16 as c_gemm_bf16
        from uol_core.odl.ir import DType
        from uol_core.odl.shapes import bind_sizes

        bf16 = sorted(n for n, t in tensors.items() if t.dtype == torch.bfloat16)
        if not bf16:
            return None
        declared = {d.name: d.dtype for d in op.inputs}
        wrong = [n for n in bf16 if declared.get(n) != DType.bf16]
        if wrong:
            return (f"bf16 data for {', '.join(wrong)}, which {op.name} declares "
                    f"{', '.join(declared[n].value for n in wrong if n in declared)}: "
                    "declare them bf16 in the ODL signature")
        sizes = bind_sizes(op, {n: tuple(t.shape) for n, t in tensors.items()})
        if c_gemm_bf16.match(op, sizes) is None:
            return (f"the C backend runs bf16 only as a GEMM (bf16 inputs, f32 accumulation, "
                    f"one contraction); {op.name} is not one, so it runs on another backend")
        return None

    def whole_op(self, op: Any) -> bool:
        """Whether a template takes `op` as a whole (flash attention), which beats splitting it
        at its contractions."""
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.backends.c.route import whole_op_template

        return whole_op_template(op)

    def plan(self, op: Any, sizes: Mapping[str, int], target: Any) -> Plan:
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.acg.config import resolve_target
        from uol_core.odl.patterns import classify
        from uol_core.plans.gemm import UnsupportedOp, lower_contraction

        target = resolve_target(target)
        try:
            return Plan(op, dict(sizes), target, "gemm", lower_contraction(op, sizes))
        except UnsupportedOp:  # every other pattern: the pattern space (backends/c/space.py)
            return Plan(op, dict(sizes), target, classify(op).kind)

    def space(self, op: Any, sizes: Mapping[str, int], target: Any):
        return self._space(self.plan(op, sizes, target))

    def _space(self, plan: Plan):
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.backends.c.gemm.space import build_space
        from uol_core.backends.c.space import build_pattern_space

        if plan.kind == "gemm":
            return build_space(plan.detail, plan.target)
        return build_pattern_space(plan.op, plan.sizes, plan.target)

    def choose(self, plan: Plan, request: Any = None) -> Choice:
        """The model's top config, user overrides on top of it, or the tuned best (a `Tuned`
        request, which the API makes of config='tuned')."""
        if plan.kind != "gemm":
            # loaded when asked for: importing the registry row stays cheap
            from uol_core.backends.c.space import choose_pattern_config

            cfg, space = choose_pattern_config(plan.op, plan.sizes, plan.target, request)
            return Choice(cfg, space)
        return _choose_tile(plan, request)

    def emit(self, plan: Plan, config: Any) -> KernelSource:
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.acg.config import TileConfig
        from uol_core.backends.c import emit

        if plan.kind == "gemm" and not isinstance(config, TileConfig):
            config = TileConfig.from_config(config)
        elif plan.kind != "gemm":
            config = dict(config or {})
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.runtime.cross import for_target

        # a kernel for a CPU of another architecture is built for it and run under emulation
        return for_target(emit(plan.op, config, plan.target, plan.sizes), plan.target)

    def load(self, source: KernelSource, plan: Plan):
        """The GEMM's float32 kernel called on raw pointers; any other kernel through CKernel,
        which converts inputs to their declared dtypes; under the emulator (EmulatedKernel) for
        a kernel built for another architecture."""
        if source.meta.get("cross"):
            # loaded when asked for: importing the registry row stays cheap
            from uol_core.runtime.emulate import EmulatedKernel

            return EmulatedKernel(source, plan.op, plan.sizes, float32_only=plan.kind == "gemm")
        if plan.kind != "gemm":
            # loaded when asked for: importing the registry row stays cheap
            from uol_core.backends.c.native import CKernel

            return CKernel(source, plan.op, plan.sizes)
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.odl.shapes import shape_of
        from uol_core.runtime.build import build
        from uol_core.runtime.native import NativeKernel

        shapes = {n: shape_of(plan.op, n, plan.sizes) for n in source.meta["args"]}
        return NativeKernel(build(source), source.entry, source.meta["args"], shapes)

    def hash(self) -> str:
        """The generator's identity: GENERATOR_FILES and the compile flags (runtime.build)."""
        from uol_core.runtime import build  # the flags only: the adapter may import the runtime

        flags = repr((build.CC, build.BASE_FLAGS, build.ISA_FLAGS, build.TARGET_FLAGS,
                      build.CROSS_BASE_FLAGS))
        return "c-" + generator_hash(GENERATOR_FILES, flags)

    def older_generators(self) -> tuple[str, ...]:
        """The generator's key before `hash` named every file and flag: the hash of the entry
        and the templates, then the template's name ('c-<hash>/uol-c-rows-1'), read from the
        package the templates live in now."""
        return ("c-" + source_hash("c/**/*.py", "base.py") + "/",)

    def tuning_model(self, plan: Plan, space: Any):
        """GEMMs: the tile cost model; every other pattern: its roofline."""
        # acg's models load when a tune asks: importing the registry row stays cheap
        from uol_core.backends.c.gemm.cost_model import GemmModel
        from uol_core.backends.c.space import PatternModel

        if plan.kind == "gemm":
            return GemmModel(plan.detail, plan.target)
        return PatternModel(plan.op, plan.sizes, plan.target)

    def tuning_runner(self, plan: Plan, worker: Any = None, seed: int = 0,
                      min_seconds: float = 0.15, timeout_s: float = 120.0):
        """Kernels built, verified and timed in the worker (`worker`: the isolated process by
        default, or a queued or remote one); a pattern's GFLOP/s counts its own work."""
        # the runner and the worker load when a tune asks: importing the row stays cheap
        from uol_core.backends.c import emit
        from uol_core.odl.cost import op_cost
        from uol_core.runtime.runners import WorkerRunner

        if plan.kind == "gemm":
            def source(cfg):  # the GEMM's TileConfig, emitted as such (no cross-build wrapper)
                return emit(plan.op, cfg, plan.target, plan.sizes)
            flops = None  # the worker rates a GEMM itself
        else:
            def source(cfg):
                return emit(plan.op, dict(cfg), plan.target, plan.sizes)
            flops = op_cost(plan.op, plan.sizes).flops
        return WorkerRunner(source, plan.op, plan.sizes, worker, seed, min_seconds, timeout_s,
                            flops)


def _choose_tile(plan: Plan, request: Any) -> Choice:
    # loaded when asked for: importing the registry row stays cheap
    from uol_core.acg.config import lanes, named_keys, parse_config, target_isas
    from uol_core.backends.c.gemm.cost_model import CostModel
    from uol_core.backends.c.gemm.space import build_space
    from uol_core.odl.shapes import ShapeError

    target = plan.target
    space = build_space(plan.detail, target)
    model = CostModel(plan.detail, target)
    if not space.configs:
        raise ShapeError(f"no legal config for {plan.op.name} at {dict(plan.sizes)} on "
                         f"{target.name}")
    best = model.rank(space.configs)[0][0]
    if request is None:
        return Choice(best, space, model)
    if isinstance(request, Tuned):
        return Choice(request.lookup(DEFAULT_TUNE_BUDGET) or best, space, model)
    cfg = parse_config(request, best)
    if space.derive is not None and isinstance(request, (str, dict)) \
            and "nc" not in named_keys(request):
        # nc follows the knobs the request changed (a jr split hands out nc-column chunks:
        # the model's nc = N for an ir split would leave one chunk, one busy thread)
        cfg = cfg.replace(**space.derive(cfg.to_dict()))
    # The space's other constraints only cost speed, so overrides may break them to explore;
    # these two are what the packing and the unrolled k loop rely on (an mc that is not a
    # multiple of mr overran the A panel).
    if (cfg.path == "packed" and cfg.mc % cfg.mr) or cfg.kc % cfg.ku:
        raise ValueError(f"mc={cfg.mc} must be a multiple of mr={cfg.mr} and kc={cfg.kc} of "
                         f"ku={cfg.ku} (constraint 'divisibility': A is packed in whole "
                         "mr-row strips, the k loop is unrolled ku times; the direct path "
                         "packs no A and needs only the second)")
    if cfg.nr % lanes(cfg.isa, target):
        raise ValueError(f"nr={cfg.nr} must be a multiple of the {cfg.isa} vector "
                         f"({lanes(cfg.isa, target)} lanes)")
    if cfg.isa not in space.domains["isa"] and cfg.isa not in target_isas(target):
        raise ValueError(f"isa={cfg.isa} is not available on target {target.name} "
                         f"(usable: {', '.join(dict.fromkeys([*space.domains['isa'], *target_isas(target)]))})")
    return Choice(cfg, space, model)
