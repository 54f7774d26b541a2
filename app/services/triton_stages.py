"""The Studio's Triton stages: the compiled kernel's TTIR, TTGIR, LLVM IR and PTX for the page's
GPU target (uol_core.runtime.triton_stages), each stage line tied to its Triton source line and,
through the kernel's line map, to its ODL line.

Compiling a kernel takes seconds (a large GEMM tile, tens of seconds on a busy host), so each
result is kept in a private, bounded server cache keyed by the kernel text's hash, the target,
the kernel and whether the binary was asked for: switching stages or kernels costs nothing.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from dataclasses import dataclass

CACHE_ENTRIES = 32  # compiled modules kept (a PTX listing of a large GEMM is ~1 MB)
_CACHE: OrderedDict[tuple, object] = OrderedDict()
_LOCK = threading.Lock()


@dataclass
class StageView:
    """What the stages pane shows: one stage's rows and the choices around it."""

    stage: str
    kernel: str
    kernels: list[str]
    stages: list[tuple[str, str]]  # (name, label) of every stage compiled
    text: str
    rows: list[tuple[str, int | None, int | None]]  # (text, Triton line, ODL line) per line
    summary: str


def _cached(key: tuple, compute):
    """The result under `key`, computed once; the least recently used entry goes first."""
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    value = compute()  # outside the lock: another page's compile does not wait on this one
    with _LOCK:
        _CACHE[key] = value
        _CACHE.move_to_end(key)
        while len(_CACHE) > CACHE_ENTRIES:
            _CACHE.popitem(last=False)
    return value


def cache_size() -> int:
    return len(_CACHE)


def stages_view(state: dict, stage: str = "ptx", kernel: str | None = None,
                binary: bool = False) -> StageView:
    """The stages of the Studio state's Triton kernel (StagesError: why there are none)."""
    from app.services.kernels import _target, compile_bounds, emit
    from uol_core.runtime.triton_stages import (
        StagesError,
        binary_note,
        compile_stages,
        gpu_arch,
        kernel_specs,
    )

    arch = gpu_arch(_target(state["target"]))  # a CPU target is said before any compile
    with compile_bounds() as check:
        op, sizes, source, _, _ = emit(state["odl"], state["backend"], state["target"],
                                       state["sizes"], state["config"], check)
    if source.lang != "triton":  # the kernel's language, whichever backend wrote it
        raise StagesError(f"Triton stages are of a Triton kernel; this one is {source.lang}: "
                          "pick the Triton backend")
    specs = {spec.name: spec for spec in kernel_specs(source, op, sizes)}
    if not specs:
        raise StagesError("the module has no Triton kernel to compile")
    name = kernel if kernel in specs else next(iter(specs))
    digest = hashlib.sha256(source.text.encode()).hexdigest()
    key = (digest, state["target"], name, bool(binary))
    result = _cached(key, lambda: compile_stages(source.text, specs[name], arch,
                                                  file_name=f"{op.name}_kernel.py",
                                                  binary=binary))
    names = [s.name for s in result.stages]
    chosen = result.stage(stage if stage in names else "ptx" if "ptx" in names else names[-1])
    rows = [(text, chosen.source_lines.get(n), source.line_map.get(chosen.source_lines.get(n)))
            for n, text in enumerate(chosen.text.splitlines(), 1)]
    mapped = sum(1 for _, line, _ in rows if line)
    summary = (f"{chosen.label} of {name} for {state['target']} ({arch.backend} "
               f"{arch.label}, {specs[name].num_warps} warps), Triton {result.triton_version}: "
               f"{len(rows)} lines, {mapped} tied to a source line; {binary_note(result)}")
    return StageView(chosen.name, name, list(specs), [(s.name, s.label) for s in result.stages],
                     chosen.text, rows, summary)
