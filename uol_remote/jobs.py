"""Jobs built on the coordinator exactly as a local run builds them: the kernel is emitted
here from the target's HFL record (plan, config, emitter through the backend registry), and
the worker builds, verifies and times it on its own hardware."""

from __future__ import annotations

from uol_core.acg.config import resolve_target
from uol_core.api import check_memory
from uol_core.backends import get_backend
from uol_core.odl import parse
from uol_core.odl.shapes import bind_sizes
from uol_core.runtime.worker import make_job


def kernel_job(odl: str, target: str, sizes: dict, config: dict | None = None,
               backend: str = "c", min_seconds: float = 0.2) -> tuple[dict, dict]:
    """(the job for `RemoteWorker.run`, the config the backend chose) for one C kernel."""

    op = parse(odl)
    bound = bind_sizes(op, sizes)
    check_memory(op, bound)
    tgt = resolve_target(target)
    chosen = get_backend(backend, tgt)
    plan = chosen.plan(op, bound, tgt)
    src = chosen.emit(plan, chosen.choose(plan, config or None).config)
    return make_job(src, odl, f"{op.name}.odl", bound, min_seconds=min_seconds), dict(src.config)
