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


def test_nc_is_derived_and_every_legal_config_is_accepted_at_its_own_sizes():
    """nc follows kc, nr, par and threads (block_nc): a tuned or recorded config of the space
    resolves to itself, a config without nc gets its own, and a stale nc is refused."""
    from app.services.knobs import space_for
    from uol_core.backends.c.gemm.space import block_nc

    sizes = {"M": 256, "N": 4096, "K": 512}
    space = space_for(GEMM, "c", "host", tuple(sorted(sizes.items())))
    configs = space.acg.configs
    assert space.legal_values("nc") == sorted({c.nc for c in configs})
    for cfg in configs[:: max(1, len(configs) // 50)]:
        assert space.resolve(cfg.to_dict()) == cfg.to_dict()
        without_nc = {k: v for k, v in cfg.to_dict().items() if k != "nc"}
        assert space.resolve(without_nc)["nc"] == block_nc(
            space.acg.plan, space.acg.target, cfg.kc, cfg.nr, cfg.par, cfg.threads)
    small = space_for(GEMM, "c", "host", tuple(sorted(SMALL.items())))
    stale = next(v for v in space.legal_values("nc") if v not in small.legal_values("nc"))
    with pytest.raises(ValueError, match=f"knob nc={stale} is not one of its legal values"):
        small.resolve({"nc": stale})


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


def _client_app():
    """A Dash app behind the IDE's token guard and client tagging, whose one callback says
    which job-queue client it runs for."""
    from dash import Dash, Input, Output, html

    from app import security

    dash_app = Dash(__name__)
    dash_app.layout = html.Div([html.Button(id="go"), html.Div(id="who")])

    @dash_app.callback(Output("who", "children"), Input("go", "n_clicks"))
    def who(_clicks):
        return job_queue.client_id()

    token = security.new_token()
    security.install(dash_app, token)
    job_queue.install(dash_app)
    return dash_app.server, token


BASE = "http://127.0.0.1:8050"


def _who(client, token: str, cookie: str = "") -> str:
    body = {"output": "who.children", "outputs": {"id": "who", "property": "children"},
            "inputs": [{"id": "go", "property": "n_clicks", "value": 1}],
            "changedPropIds": ["go.n_clicks"]}
    headers = {"X-UOL-Token": token, **({"Cookie": cookie} if cookie else {})}
    resp = client.post("/_dash-update-component", json=body, headers=headers, base_url=BASE)
    assert resp.status_code == 200, resp.text
    return resp.get_json()["response"]["who"]["children"]


def test_jobs_queue_per_browser_by_its_cookies_and_refusals_get_no_client_cookie():
    from app.security import cookie_name

    server, token = _client_app()
    client = server.test_client()
    refused = client.get("/_dash-layout", base_url=BASE)
    assert refused.status_code == 401
    assert not [c for c in refused.headers.getlist("Set-Cookie") if c.startswith("uol_client")]
    tagged = client.get("/_dash-layout", headers={"X-UOL-Token": token}, base_url=BASE)
    assert any(c.startswith("uol_client=") for c in tagged.headers.getlist("Set-Cookie"))

    fresh = server.test_client(use_cookies=False)
    assert _who(fresh, token) == job_queue.LOCAL_CLIENT
    # the session cookie is named per port: the one of this port identifies the browser
    port_cookie = f"{cookie_name('127.0.0.1:8050')}=s1"
    assert _who(fresh, token, port_cookie) == "s1"
    assert _who(fresh, token, "uol_session_9999=other") == job_queue.LOCAL_CLIENT
    assert _who(fresh, token, f"{port_cookie}; uol_client=browser-7") == "browser-7"
