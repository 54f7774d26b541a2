"""The optimisation guide's measured cases from live workers: the measurers that
`uol_core.guide.measure` asks for, one per target, sending each case's kernel to a live worker
of that target as a signed job (the same job a remote Run sends) and labelling its time with
the worker that measured it."""

from __future__ import annotations

from uol_core.guide.measure import CaseMeasurer, MeasurerFor, local_measurer
from uol_remote.client import Coordinator, RemoteWorker
from uol_remote.tasks import DEFAULT_TIMEOUT_S


def worker_label(result: dict) -> str:
    """'measured on worker NODE (CPU, N cores, host H)' from a remote result's host facts."""
    worker = result.get("worker") or {}
    facts = ", ".join(filter(None, [str(worker.get("cpu") or ""),
                                    f"{worker['cores']} cores" if worker.get("cores") else "",
                                    f"host {worker['host']}" if worker.get("host") else ""]))
    return f"measured on worker {worker.get('node', '?')} ({facts or 'no host facts'})"


def remote_measurer(coordinator: Coordinator, target: str,
                    timeout_s: float = DEFAULT_TIMEOUT_S) -> CaseMeasurer:
    """Cases of `target` built, verified and timed on its live workers: C kernels as kernel
    jobs, other backends' kernels (Triton on a GPU worker) as run requests."""
    worker = RemoteWorker(coordinator, target, timeout_s=timeout_s)

    def run_request(request: dict, timeout: float) -> dict:
        return coordinator.submit("request", target, request, timeout=timeout)

    return CaseMeasurer(run_kernel=worker.run, run_request=run_request, label=worker_label)


def guide_measurers(broker_url: str, secret=None, measure_host_here: bool = True,
                    timeout_s: float = DEFAULT_TIMEOUT_S) -> tuple[MeasurerFor, list[dict]]:
    """(measurer_for, the live workers seen): a target with a live worker is measured there;
    `host` without one is measured on this machine when `measure_host_here`; every other target
    keeps its model prediction. Raises (redis errors, SecretError) when the broker or the secret
    is unusable, before anything is measured."""
    coordinator = Coordinator(broker_url, secret)
    workers = coordinator.live_workers()
    served = {w["target"] for w in workers}

    def measurer_for(target: str) -> CaseMeasurer | None:
        if target in served:
            # a coordinator per target: each target's cases are measured on a thread of its own
            return remote_measurer(Coordinator(broker_url, coordinator.secret,
                                               coordinator.caller), target, timeout_s)
        if target == "host" and measure_host_here:
            return local_measurer(timeout_s)
        return None

    return measurer_for, workers
