"""Child process of a worker for jobs that carry no code: a Triton (or reference) kernel compiled
here from the job's ODL, a profile of a library op, and a gloo measurement. Runs as `python -m
uol_remote.child` with one JSON request on stdin, so a kernel that crashes or hangs takes down
this process only, as a local run does. It runs as the worker's user, without the broker's
address and the shared secret in its environment (a C kernel job, whose C comes from the job,
runs in the sandbox instead: kernel_sandbox.py).

Deferred imports: a worker process loads only the engine its job kind needs (compiler,
profilers, gloo), so a worker starts fast and a job's process holds no more than it runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

MARK = "@@UOL-REMOTE@@"


def run_request(request: dict) -> dict:
    """Compile through the backend registry, verify against the reference, time (as `uol run`
    does for backends that run in-process); keys as the IDE's run results."""
    from uol_core import compile as compile_kernel
    from uol_core import parse
    from uol_core.runtime.inputs import random_inputs
    from uol_core.runtime.measure import time_call
    from uol_core.runtime.reference import evaluate_all
    from uol_core.runtime.verify import compare

    op = parse(request["odl"])
    kernel = compile_kernel(op, request["sizes"], request["target"], request["backend"],
                            request.get("config") or None)
    inputs = random_inputs(op, kernel.sizes, seed=0)
    outs = kernel(**inputs)
    outs = outs if isinstance(outs, dict) else {op.outputs[0].name: outs}
    depth = int(kernel.kernel_source.meta.get("reduction_length")
                or max(kernel.sizes.values(), default=1))
    verdict = compare(outs, evaluate_all(op, inputs), depth)
    out = {"ok": verdict.ok, "op": op.name, "sizes": kernel.sizes, "config": kernel.config,
           "max_error": {"abs": verdict.max_abs_err, "rel": verdict.max_rel_err},
           "tolerance": verdict.atol, "status": "ok" if verdict.ok else "mismatch"}
    note = getattr(kernel.kernel, "timing_note", "")
    out["mode"] = note or "measured"
    if verdict.ok and not note:
        timing = time_call(lambda: kernel(**inputs), min_seconds=0.2)
        out.update(median_s=timing.median_s, iqr_s=timing.iqr_s, repeats=timing.repeats)
    return out


def run_profile(request: dict) -> dict:
    """The Profiler's operator report (flame, hotspots, timings, roofline) of one op."""
    from profilers.report import operator_report

    return operator_report(request["op"], request["sizes"], request.get("target", "host"),
                           repeats=int(request.get("repeats", 3)), hotspots=True)


def run_gloo(request: dict) -> dict:
    """The Communication page's real measurement: a collective on `ranks` gloo processes of
    this machine (hcf_sim's benchmark task), its rows as measured."""
    from hcf_sim.runtime.gloo import run_local

    return run_local(request["task"], int(request["ranks"]))


HANDLERS = {"request": run_request, "profile": run_profile, "gloo": run_gloo}


def child_env() -> dict[str, str]:
    """The worker's environment without the broker and the shared secret: the child needs
    neither, and what it runs was compiled from the job (ODL, a library op's name)."""
    from uol_remote.celery_app import BROKER_ENV
    from uol_remote.signing import SECRET_ENV, SECRET_FILE_ENV

    return {k: v for k, v in os.environ.items()
            if k not in (BROKER_ENV, SECRET_ENV, SECRET_FILE_ENV)}


def run_in_child(kind: str, request: dict, timeout: float) -> dict:
    """Run handler `kind` in a child process; a timeout, crash or missing answer becomes
    {"ok": False, "error"} naming what happened."""
    try:
        proc = subprocess.run([sys.executable, "-m", "uol_remote.child", kind],
                              input=json.dumps(request), capture_output=True, text=True,
                              timeout=timeout, env=child_env())
    except subprocess.TimeoutExpired:
        return {"ok": False, "status": "timeout",
                "error": f"the {kind} did not finish within {timeout:.0f} s (timeout); the "
                         "worker's child was stopped"}
    if MARK not in proc.stdout:
        how = f"signal {-proc.returncode}" if proc.returncode < 0 else \
            f"exit status {proc.returncode}"
        return {"ok": False, "status": "crash",
                "error": f"the {kind} process ended with {how}: {proc.stderr.strip()[-600:]}"}
    return json.loads(proc.stdout.rsplit(MARK, 1)[1])


def main() -> None:
    """Answer the request on stdin with the handler named in argv; errors as results."""
    request = json.loads(sys.stdin.read())
    try:
        result = HANDLERS[sys.argv[1]](request)
    except Exception as exc:  # the coordinator shows it like a failed local run
        result = {"ok": False, "status": "error", "error": f"{type(exc).__name__}: {exc}"}
    sys.stdout.write("\n" + MARK + json.dumps(result, default=str) + "\n")


if __name__ == "__main__":
    main()
