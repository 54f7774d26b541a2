"""Run a kernel in a worker process (verify + measure), add GFLOP/s, GB/s and roofline, record it.

The kernel never runs in the server: a crash shows as the signal that ended the worker, a hang
as a timeout, and the server keeps serving. Jobs go through the per-client queue
(`job_queue`): one client's hang holds its own queue and one pool slot, never everyone's.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

from app.services import history
from app.services.job_queue import LOCAL_CLIENT, JobRefused, job_slot, only_one
from app.services.run_child import MARK
from app.services.tune_runs import queued_session, tune_queued
from uol_core.backends import get_backend, kernel_backend_names

RUN_TIMEOUT_S = 120.0
MAX_TUNE_BUDGET = 64  # measurements per tune: the Studio refuses more; service callers are cut to it
DEFAULT_TUNE_BUDGET = 6
REPO_ROOT = Path(__file__).resolve().parents[2]


def run_json_child(args: list[str], mark: str, stdin: str | None, timeout: float, *,
                   timed_out: str, failed: str = "the worker exited with status {status}: ",
                   env: dict | None = None, tail: int = 600) -> dict:
    """Run `python <args>` in a worker process and return the JSON it prints after `mark`.

    A timeout, a death by signal or output without the mark becomes {"ok": False, "error"}
    (the messages name what ran), so the server keeps serving whatever the child did.
    """
    full_env = dict(os.environ, **(env or {}))
    # the child imports `app` the same way this process did, installed or from a checkout
    full_env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT),
                                                           full_env.get("PYTHONPATH")]))
    try:
        proc = subprocess.run([sys.executable, *args], input=stdin, capture_output=True,
                              text=True, timeout=timeout, env=full_env, cwd=str(REPO_ROOT))
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": timed_out.format(timeout=timeout)}
    if proc.returncode < 0:
        name = signal.Signals(-proc.returncode).name
        return {"ok": False, "error": f"the worker process died with {name}. "
                                      f"{proc.stderr.strip()[-tail:]}".strip()}
    if mark not in proc.stdout:
        return {"ok": False, "error": failed.format(status=proc.returncode)
                + proc.stderr.strip()[-tail:]}
    return json.loads(proc.stdout.rsplit(mark, 1)[1])


def _worker(request: dict, timeout: float) -> dict:
    """Run app.services.run_child with the request; map crashes and timeouts to readable errors."""
    res = run_json_child(["-m", "app.services.run_child"], MARK, json.dumps(request), timeout,
                         timed_out="the kernel did not finish within {timeout:.0f} s (timeout); "
                                   "the worker was stopped",
                         failed="the worker exited with status {status} and no result: ",
                         tail=800)
    if not res.get("ok", True) and res["error"].startswith("the worker process died with"):
        res["error"] = "the kernel crashed: " + res["error"]
    return res


_WORKERS: dict[int, object] = {}  # slot index -> long-lived uol_core Worker (warm: no torch import)


def _c_worker(request: dict, timeout: float, slot: int) -> dict:
    """Verify and time a C kernel in the worker process of pool slot `slot` (held by the
    caller, so no other job uses that worker now); same result keys as run_child."""
    from dataclasses import asdict

    from app.services.kernels import emit
    from uol_core.runtime.worker import Worker, make_job

    op, sizes, src, _, _ = emit(request["odl"], request["backend"], request["target"],
                                request["sizes"], request.get("config"))
    job = make_job(src, request["odl"], f"{op.name}.odl", sizes, min_seconds=0.2)
    from app.services import remote

    sent = remote.worker_for(request["target"])  # a live worker of the target runs it there
    if sent is None and slot not in _WORKERS:
        _WORKERS[slot] = Worker(timeout)
    res = (sent or _WORKERS[slot]).run(job, timeout)
    out = {"ok": res.get("status") == "ok", "op": op.name, "sizes": sizes,
           "config": dict(src.config), "mode": "measured", "status": res.get("status"),
           "max_error": {"abs": res.get("max_abs_err"), "rel": res.get("max_rel_err")},
           "tolerance": res.get("atol")}
    if res.get("reason"):
        out["error"] = res["reason"]
    if res.get("emulated"):  # cross-built and run by the emulator: checked, never timed
        from uol_core.runtime.cross import EMULATED_NOTE

        out["mode"] = EMULATED_NOTE
    for key in ("median_s", "iqr_s", "repeats", "samples"):
        if res.get(key) is not None:
            out[key] = res[key]
    out["source_meta"] = {"entry": asdict(src)["entry"]}
    if res.get("timed_in_place"):  # an op writing over its inputs, timed as donated
        out["mode"] = f"measured in place ({', '.join(res['timed_in_place'])} written over)"
    if res.get("worker"):  # provenance: the machine that measured it
        out["worker"] = res["worker"]
        out["mode"] = out["mode"].replace("measured", f"measured on {remote.ran_on(res)}", 1)
    return out


def _remote_request(target: str):
    """A function running a non-C request on a live worker of `target`, or None."""
    from app.services import remote

    if not remote.workers_for(target):
        return None

    def run(request: dict, timeout: float) -> dict:
        res = remote.submit("request", target, request, timeout)
        if res.get("worker"):
            res["mode"] = f"{res.get('mode', 'measured')} on {remote.ran_on(res)}"
        return res
    return run


def add_rates(result: dict, odl: str, target: str) -> dict:
    """GFLOP/s, GB/s and the roofline position from the measured median time."""
    from uol_core import op_cost, parse
    from uol_core.hfl import load_target
    from uol_core.hfl.roofline import peak_key, roofline
    from uol_core.odl.cost import peak_dtype

    if not result.get("ok") and "median_s" not in result:
        return result
    op = parse(odl)
    cost = op_cost(op, result["sizes"])
    result["flops"], result["bytes"] = cost.flops, cost.bytes
    seconds = result.get("median_s")
    if seconds:
        result["gflops"] = cost.flops / seconds / 1e9
        result["gbs"] = cost.bytes / seconds / 1e9
    try:
        hfl = load_target(target)
        # against the peak of the units the op runs on (a bf16 GEMM: the bf16 peak)
        roof = roofline(cost.flops, cost.bytes, hfl, peak_key(hfl, peak_dtype(op)),
                        seconds=seconds or None)
        result["roofline"] = roof.to_dict()
    except ValueError as exc:
        result["roofline_error"] = str(exc)
    return result


def check_request(odl: str, backend: str, target: str, sizes: dict, config: dict | None) -> None:
    """Refuse a request outside its bounds before anything is built or run: sizes over the
    memory budget (ShapeError, checked first: the knobs' legal lists depend on the sizes),
    then every knob value must be one its knob may take (ValueError; nc included)."""
    from app.services.knobs import space_for
    from uol_core import parse
    from uol_core.api import check_memory
    from uol_core.odl.shapes import bind_sizes

    if backend not in kernel_backend_names():
        raise ValueError(f"unknown backend '{backend}': use {' or '.join(kernel_backend_names())}")
    op = parse(odl)
    bound = bind_sizes(op, sizes)
    check_memory(op, bound)
    space_for(odl, backend, target, tuple(sorted(bound.items()))).resolve(config or {})


def run_kernel(odl: str, backend: str, target: str, sizes: dict, config: dict | None,
               timeout: float = RUN_TIMEOUT_S, kernel_text: str = "", kind: str = "run",
               client: str = LOCAL_CLIENT) -> dict:
    """Verify and measure one kernel in a pool worker, queued behind `client`'s own jobs only;
    the result dict carries its history id."""
    request = {"odl": odl, "backend": backend, "target": target, "sizes": sizes,
               "config": config or {}}
    from uol_core.runtime import stats

    before = stats.load_snapshot()
    try:
        check_request(odl, backend, target, sizes, config)
        with job_slot(client, kind) as slot:
            if getattr(get_backend(backend), "worker_jobs", False) \
                    and not os.environ.get("UOL_FAULT_INJECT"):
                result = _c_worker(request, timeout, slot)
            elif _remote_request(request["target"]):  # Triton on a live worker of the target
                result = _remote_request(request["target"])(request, timeout)
            else:  # Triton (interpreter or GPU), and the crash/hang test hook
                result = _worker(request, timeout)
    except Exception as exc:  # a refusal or compile error before the run: shown like a failed run
        result = {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
    result.setdefault("sizes", sizes)
    result.setdefault("config", config or {})
    try:
        result = add_rates(result, odl, target)
    except Exception as exc:  # rates are extras: keep the verified result
        result["rates_error"] = f"{type(exc).__name__}: {exc}"
    if result.get("median_s"):  # n, the CI and the noisy flag with its reason, stored with it
        result["load"] = stats.load_during(before)
        result.update(stats.summary(result.get("samples"), median_s=result["median_s"],
                                    iqr_s=result.get("iqr_s"), load=result["load"]))
    result["id"] = history.record(kind, request, result, kernel_text)
    return result


def capped_budget(budget) -> int:
    """A tune budget within 1..MAX_TUNE_BUDGET; a larger request is cut to the cap."""
    try:
        value = int(budget or DEFAULT_TUNE_BUDGET)
    except (TypeError, ValueError, OverflowError):
        value = DEFAULT_TUNE_BUDGET
    return max(1, min(value, MAX_TUNE_BUDGET))


def tune(odl: str, backend: str, target: str, sizes: dict, budget: int, progress=None,
         base: dict | None = None, client: str = LOCAL_CLIENT, stop=None) -> dict:
    """Measure up to `budget` (at most MAX_TUNE_BUDGET) legal configs with the shared search;
    one tune per client at a time (a second is refused), each measurement queued like a Run."""
    with only_one(client, "tune"):
        return tune_measurements(odl, backend, target, sizes, budget, progress, base, client,
                                 stop)


def tune_measurements(odl: str, backend: str, target: str, sizes: dict, budget: int,
                      progress=None, base: dict | None = None, client: str = LOCAL_CLIENT,
                      stop=None) -> dict:
    """The measurements of `tune` (the caller holds the client's tune lock); `stop()` true
    ends the tune before its next measurement."""
    from app.services.knobs import space_for
    from uol_core import parse
    from uol_core.odl.shapes import bind_sizes

    check_request(odl, backend, target, sizes, base)
    bound = bind_sizes(parse(odl), sizes)
    space = space_for(odl, backend, target, tuple(sorted(bound.items())))
    from app.services.kernels import inert_knobs

    session = queued_session(space, base, capped_budget(budget),
                             lambda cfg: run_kernel(odl, backend, target, bound, cfg,
                                                    kind="tune", client=client), stop, progress,
                             inert=inert_knobs(odl, backend, target, bound,
                                               space.resolve(base or {})))
    stopped = tune_queued(session)  # the shared search: spread over the space, then neighbours
    runs = session.runner
    return {"best": runs.best, "trail": runs.trail, "budget": runs.budget,
            "cap": MAX_TUNE_BUDGET, "stopped": stopped}


class QueuedWorker:
    """The worker interface of `uol_core.runtime.worker.Worker` for the ACG tuner, but each
    job waits in `client`'s queue and runs in the pool worker of the slot it gets."""

    def __init__(self, client: str = LOCAL_CLIENT, timeout_s: float = RUN_TIMEOUT_S,
                 target: str = ""):
        # `target`: with `uol serve --broker`, a live worker of it measures instead
        self.client, self.timeout_s, self.target = client, timeout_s, target

    def run(self, job: dict, timeout_s: float | None = None) -> dict:
        from app.services import remote
        from uol_core.runtime.worker import Worker

        timeout = timeout_s or self.timeout_s
        sent = remote.worker_for(self.target) if self.target else None
        if sent is not None:  # measured on a live worker of the target (RemoteError: not run)
            return sent.run(job, timeout)
        try:
            with job_slot(self.client, "tune measurement") as slot:
                if slot not in _WORKERS:
                    _WORKERS[slot] = Worker(timeout)
                return _WORKERS[slot].run(job, timeout)
        except JobRefused as exc:
            return {"status": "error", "reason": str(exc)}

    def close(self) -> None:
        """The pool's workers outlive one tune."""
