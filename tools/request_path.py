"""Follow a request through the code: which files it visits and where it climbs back up a layer.

Three requests a user makes every day are run in this process under a profile hook:
- a Studio Run (`app.services.run_child.run`: compile, verify and time one op),
- a Tune (`uol_core.api.tune` with a small budget and a private tuning database),
- a graph import (`app.services.graph_child.run_request` on a sample graph).

For each it prints the project files visited and every distinct call from a lower layer into a
higher one (a climb). Each request runs cold (nothing built or cached in this process), so the
whole path shows; code that runs while a module loads is skipped: a request is what runs, not
what loads. The layers are those of docs/architecture.md, top (0) to bottom.

    python tools/request_path.py            # a table
    python tools/request_path.py --json     # the figures as JSON
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# module prefix -> layer, most specific first; import arrows point from a lower number to a
# higher one only (docs/architecture.md, "Layers"). The tuning session sits above the registry
# it asks; the spaces' core, the plans and fusion below the templates that read them; an ISA's
# platform file is a hardware fact like the HFL's.
LAYERS: tuple[tuple[str, int, str], ...] = (
    ("app", 0, "IDE"), ("uol_cli", 0, "CLI"),
    ("uol_core.graph", 1, "graph"), ("uol_core.torch", 1, "torch"),
    ("uol_core.api", 2, "API"),
    ("uol_core.acg.session", 3, "tuning"), ("uol_core.acg.tuner", 3, "tuning"),
    ("uol_core.acg.tuning_models", 3, "tuning"),
    ("uol_core.backends.c.platforms", 8, "facts"),
    ("uol_core.backends", 4, "backends"),
    ("uol_core.acg", 5, "ACG"), ("uol_core.plans", 5, "plans"),
    ("uol_core.runtime.usercache", 9, "system"),  # private cache folders, used by every layer
    ("uol_core.runtime", 6, "runtime"),
    ("uol_core.hfl", 7, "facts"), ("uol_core.odl", 8, "language"), ("uol_core.ops", 8, "ops"),
)


def module_of(filename: str) -> str | None:
    """The dotted module of a project file, or None for files outside the project."""
    try:
        rel = Path(filename).resolve().relative_to(ROOT)
    except ValueError:
        return None
    if rel.suffix != ".py" or rel.parts[0] in {".venv", "tests", "tools", "benchmarks"}:
        return None
    parts = list(rel.with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> tuple[int, str] | None:
    for prefix, rank, name in LAYERS:
        if module == prefix or module.startswith(prefix + "."):
            return rank, name
    return None


def trace(request: Callable[[], object]) -> dict:
    """Run `request` under a profile hook; the files it visits and the calls that climb."""
    files: list[str] = []
    climbs: set[tuple[str, str]] = set()
    loading = [0]  # depth of module bodies running (an import inside the request)

    modules: dict[str, str | None] = {}  # file name -> module: the hook runs on every call

    def module_at(code) -> str | None:
        name = code.co_filename
        if name not in modules:
            modules[name] = module_of(name)
        return modules[name]

    def hook(frame, event, _arg):
        if event != "call" and event != "return":
            return
        code = frame.f_code
        if code.co_name == "<module>":
            loading[0] += 1 if event == "call" else -1
            return
        if event != "call" or loading[0]:
            return
        callee = module_at(code)
        if callee is None:
            return
        if callee not in files:
            files.append(callee)
        caller_frame = frame.f_back
        while caller_frame is not None and module_at(caller_frame.f_code) is None:
            caller_frame = caller_frame.f_back  # through torch, functools, the standard library
        if caller_frame is None:
            return
        caller = module_at(caller_frame.f_code)
        low, high = layer_of(caller or ""), layer_of(callee)
        # a function defined inside another was handed down as a callback (a runner's source
        # function): the caller never imported it, so calling it climbs nothing
        handed_down = "<locals>" in code.co_qualname
        if low and high and high[0] < low[0] and not handed_down:
            climbs.add((caller, callee))

    sys.setprofile(hook)
    try:
        request()
    finally:
        sys.setprofile(None)
    layers = []
    for module in files:
        named = layer_of(module)
        if named and named[1] not in layers:
            layers.append(named[1])
    return {"files": len(files), "layers_in_order": layers,
            "climbs": sorted(f"{a} -> {b}" for a, b in climbs), "modules": files}


MATMUL = ("op matmul(A: f32[M, K], B: f32[K, N]) -> C: f32[M, N]:\n"
          "    C[m, n] = sum[k](A[m, k] * B[k, n])\n")


def studio_run() -> object:
    from app.services.run_child import run

    return run({"odl": MATMUL, "backend": "c", "target": "host",
                "sizes": {"M": 64, "K": 64, "N": 64}})


def tune() -> object:
    from uol_core.api import tune as api_tune
    from uol_core.runtime.tuningdb import TuningDB

    with tempfile.TemporaryDirectory() as tmp:
        return api_tune(MATMUL, {"A": (64, 64), "B": (64, 64)}, budget=2,
                        db=TuningDB(Path(tmp) / "records.sqlite"))


def graph_import() -> object:
    from app.services.graph_child import run_request
    from app.services.graphs import MODELS

    return run_request({"source": {"kind": "model", "name": sorted(MODELS)[0]}, "repeat": 1})


REQUESTS = {"Studio Run": studio_run, "Tune": tune, "graph import": graph_import}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    report = {}
    for name, request in REQUESTS.items():
        report[name] = found = trace(request)
        if not args.json:
            print(f"{name}: {found['files']} files, layers "
                  f"{' > '.join(found['layers_in_order'])}, {len(found['climbs'])} climbs",
                  flush=True)
            for climb in found["climbs"]:
                print(f"    climb {climb}", flush=True)
    if args.json:
        print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
