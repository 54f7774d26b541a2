"""Per-request bounds: legal knob values only, capped tunes, the memory budget with the
reference's intermediates, capped graph constructors, and a per-client job queue."""

from __future__ import annotations

import threading
import time

import pytest

from app.services import job_queue, runner
from uol_core.ops import op_text

GEMM = op_text("matmul")
SMALL = {"M": 64, "N": 64, "K": 64}


@pytest.fixture(autouse=True)
def private_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("UOL_JOB_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("UOL_WORKERS", "2")


@pytest.mark.parametrize("nc", [0, 10**12])
def test_nc_outside_its_legal_list_is_refused_before_anything_runs(nc):
    workers = dict(runner._WORKERS)
    start = time.monotonic()
    res = runner.run_kernel(GEMM, "c", "host", SMALL, {"nc": nc})
    assert res["ok"] is False
    assert f"knob nc={nc}" in res["error"] and "legal values" in res["error"]
    assert workers == runner._WORKERS  # no worker was started for it
    assert time.monotonic() - start < 60


@pytest.mark.parametrize("backend,config", [("c", {"mr": 999}), ("c", {"isa": "sse9"}),
                                            ("c", {"kc": 64.5}), ("triton", {"BLOCK": 3})])
def test_every_knob_is_checked_against_its_legal_list(backend, config):
    with pytest.raises(ValueError, match="knob"):
        runner.check_request(GEMM, backend, "host", SMALL, config)


def test_tune_budget_is_capped_and_the_cap_is_known():
    assert runner.capped_budget(100000) == runner.MAX_TUNE_BUDGET
    assert runner.capped_budget(-5) == 1 and runner.capped_budget("x") == 6


def test_memory_budget_counts_the_reference_intermediates(monkeypatch):
    from uol_core import ShapeError, parse
    from uol_core.api import check_memory

    monkeypatch.setenv("UOL_MEM_BUDGET_MB", "64")
    # inputs and output are 3 MiB; the non-contraction body is 512^3 floats (512 MiB)
    op = parse("op r(A: f32[M, K], W: f32[K, N]) -> Y: f32[M, N]:\n"
               "    Y[m, n] = sum[k](exp(A[m, k] * W[k, n]))\n")
    with pytest.raises(ShapeError, match="intermediates"):
        check_memory(op, {"M": 512, "N": 512, "K": 512})
    check_memory(parse(GEMM), {"M": 512, "N": 512, "K": 512})  # einsum: no full product


def _graph(target: str, args: list) -> dict:
    return {"name": "g", "inputs": {"x": {"shape": [4]}},
            "nodes": [{"name": "f", "torch": target, "args": args, "outputs": {"out": "y"}}],
            "outputs": ["y"]}


def test_graph_constructors_are_capped_and_setters_refused():
    from uol_core.graph import GraphError, graph_from_dict, validate
    from uol_core.graph.factories import MAX_FACTORY_ELEMENTS

    start = time.monotonic()
    with pytest.raises(GraphError, match=f"cap of {MAX_FACTORY_ELEMENTS:,}"):
        validate(graph_from_dict(_graph("torch.randn", [30000, 30000])))
    assert time.monotonic() - start < 5  # refused, not allocated
    with pytest.raises(GraphError, match="state"):
        validate(graph_from_dict(_graph("torch.set_flush_denormal", [True])))
    with pytest.raises(GraphError, match="constructor"):
        validate(graph_from_dict(_graph("torch.get_num_threads", [])))
    assert validate(graph_from_dict(_graph("torch.zeros", [[8, 8]]))).shapes["y"].shape == (8, 8)


def test_one_client_cannot_pile_up_jobs():
    with job_queue.job_slot("A"):
        waiting = [threading.Thread(target=_hold, args=("A",)) for _ in
                   range(job_queue.MAX_WAITING)]
        for t in waiting:
            t.start()
        time.sleep(1.0)
        with pytest.raises(job_queue.JobRefused, match="jobs waiting"), \
                job_queue.job_slot("A", wait_s=1):
            pass
    for t in waiting:
        t.join(30)


def _hold(client: str) -> None:
    with job_queue.job_slot(client):
        time.sleep(0.05)


def test_a_hang_and_eight_uncapped_tunes_leave_another_clients_run_answered():
    from app.services import debugging
    from uol_core.runtime.sandbox import Limits

    pytest.importorskip("triton")
    hang = ("while True:\n    pass\n" + debugging.EXAMPLE_KERNEL)
    hung: dict = {}
    a_trace = threading.Thread(target=lambda: hung.update(debugging.trace_user_kernel(
        hang, **debugging.EXAMPLE_CALL, client="A",
        limits=Limits(cpu_s=60, memory_mb=1024, wall_s=90))))
    a_trace.start()
    deadline = time.monotonic() + 60
    while job_queue.busy_slots() < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert job_queue.busy_slots() >= 1, "client A's hang never started"

    refused_nc = runner.run_kernel(GEMM, "c", "host", SMALL, {"nc": 0}, client="A")
    assert "legal values" in refused_nc["error"]
    stop = threading.Event()
    tune_errors: list[str] = []

    def tune_as_a() -> None:
        try:
            runner.tune(GEMM, "c", "host", SMALL, 100000, client="A", stop=stop.is_set)
        except job_queue.JobRefused as exc:
            tune_errors.append(str(exc))

    tunes = [threading.Thread(target=tune_as_a) for _ in range(8)]
    for t in tunes:
        t.start()

    start = time.monotonic()
    b_run = runner.run_kernel(GEMM, "c", "host", SMALL, None, client="B")
    took = time.monotonic() - start
    assert b_run["ok"], b_run
    assert a_trace.is_alive(), "B's run should finish while A's hang is still hanging"
    assert took < 60
    assert len(tune_errors) == 7 and all("already running" in e for e in tune_errors)

    stop.set()
    a_trace.join(120)
    for t in tunes:
        t.join(180)
    assert hung["ok"] is False and "limit" in hung["error"]
