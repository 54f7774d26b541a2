"""Outputs written over inputs (ODL `aliases`): the rules, the C kernel in place and by value,
the launch plan that donates its inputs, and the optimizers built on them."""

from __future__ import annotations

import copy

import pytest
import torch

from uol_core.acg.fixtures import fixed_target
from uol_core.backends.c.loops import generic as c_generic
from uol_core.backends.c.native import compile_c
from uol_core.odl import OdlError, parse
from uol_core.odl.builder import OpBuilder
from uol_core.odl.printer import format_op
from uol_core.ops import load_op
from uol_core.runtime.dispatch import OpRunner
from uol_core.runtime.launch import LaunchPlan, plan_for
from uol_core.runtime.reference import evaluate_all
from uol_core.torch.optim import SGD, AdamW, rows_view

SGD_TEXT = """op sgd(P: f32[N], G: f32[N], B: f32[N], lr: f32[], mu: f32[]) -> (P_next: f32[N] aliases P, B_next: f32[N] aliases B):
    B_next[n] = mu[] * B[n] + G[n]
    P_next[n] = P[n] - lr[] * B_next[n]
"""


def test_aliases_parse_print_and_build_the_same_op():
    op = parse(SGD_TEXT)
    assert op.aliases == {"P_next": "P", "B_next": "B"}
    assert parse(format_op(op)) == op
    b = OpBuilder("sgd")
    P, G, B = (b.input(n, "f32", "N") for n in "PGB")
    lr, mu = b.input("lr", "f32"), b.input("mu", "f32")
    P_next = b.output("P_next", "f32", "N", aliases="P")
    B_next = b.output("B_next", "f32", "N", aliases="B")
    (n,) = b.indices("n")
    b.assign(B_next[n], mu[()] * B[n] + G[n])
    b.assign(P_next[n], P[n] - lr[()] * B_next[n])
    assert b.build() == op


@pytest.mark.parametrize(("edit", "line", "column", "says"), [
    (("P[n] - lr", "P[N - 1 - n] - lr"), 3, 17, "must be read as P[n]"),
    (("G[n]", "G[n] + sum[k](P[k])"), 2, 45, "not inside a reduction"),
    (("lr[] * B_next[n]", "lr[] * B[n]"), 3, 31, "'B' is read after 'B_next'"),
    (("aliases B)", "aliases P)"), 1, 1, "both alias input 'P'"),
    (("aliases B)", "aliases Q)"), 1, 1, "'Q', which is not an input"),
    (("aliases B)", "aliases lr)"), 1, 1, "needs its type and shape"),
])
def test_unsafe_aliases_name_line_column_and_rule(edit, line, column, says):
    with pytest.raises(OdlError) as err:
        parse(SGD_TEXT.replace(*edit))
    assert (err.value.line, err.value.column) == (line, column)
    assert says in err.value.message


def test_an_intermediate_of_the_overwritten_input_is_not_read_after():
    text = """op f(X: f32[N]) -> (Y: f32[N] aliases X, Z: f32[N]):
    t[n] = X[n] * 2
    Y[n] = t[n] + 1
    Z[n] = t[n] * 3
"""
    with pytest.raises(OdlError, match="'t' was computed from 'X'") as err:
        parse(text)
    assert (err.value.line, err.value.column) == (4, 12)
    # as an output, t is a stored value: reading it later is safe
    parse(text.replace("-> (Y", "-> (t: f32[N], Y").replace("Z[n] = t[n] * 3", "Z[n] = t[n] * 3"))


def test_c_reads_the_input_through_the_output_pointer(golden):
    text = c_generic.emit(load_op("sgd_momentum"), {"R": 4, "C": 48}, fixed_target("avx512"),
                          {"threads": 2}).text
    assert "const float *t_P = t_P_next;" in text and "*restrict t_P " not in text
    golden("c/pattern_inplace_sgd_momentum.c", text)


def test_c_kernel_keeps_value_semantics_on_two_buffers():
    op = parse(SGD_TEXT)
    kernel = compile_c(op, {"P": (37,), "G": (37,), "B": (37,), "lr": (), "mu": ()})
    gen = torch.Generator().manual_seed(0)
    feed = {n: torch.randn(37, generator=gen) for n in "PGB"}
    feed.update(lr=torch.tensor(0.1), mu=torch.tensor(0.9))
    before = {n: t.clone() for n, t in feed.items()}
    got = kernel.run(feed)
    want = evaluate_all(op, before)
    for name in ("P_next", "B_next"):
        torch.testing.assert_close(got[name], want[name])
    for name, value in before.items():  # the inputs are left as they were
        assert torch.equal(feed[name], value), name


def test_donated_plan_updates_in_place_and_the_plain_plan_does_not():
    runner = OpRunner(load_op("sgd_momentum"), "c")
    gen = torch.Generator().manual_seed(1)
    feed = {n: torch.randn(5, 33, generator=gen) for n in "PGB"}
    feed.update(lr=torch.tensor(0.05), momentum=torch.tensor(0.9), decay=torch.tensor(0.01))
    order = list(feed)
    want = evaluate_all(runner.op, {n: t.clone() for n, t in feed.items()})
    plain = plan_for(runner, feed, order)
    out = plain([feed[n] for n in order])
    assert out[0].data_ptr() != feed["P"].data_ptr()
    torch.testing.assert_close(out[0], want["P_next"])
    donated = plan_for(runner, feed, order, donate=True)
    p_ptr = feed["P"].data_ptr()
    out = donated([feed[n] for n in order])
    assert out[0].data_ptr() == p_ptr and out[1].data_ptr() == feed["B"].data_ptr()
    torch.testing.assert_close(feed["P"], want["P_next"])
    torch.testing.assert_close(feed["B"], want["B_next"])
    with pytest.raises(ValueError, match="written in place and must be contiguous"):
        donated([feed[n].t().contiguous().t() if n == "P" else feed[n] for n in order])


def test_bound_inputs_are_read_through_their_pointers_and_never_passed():
    runner = OpRunner(load_op("sgd_momentum"), "c")
    gen = torch.Generator().manual_seed(3)
    feed = {n: torch.randn(4, 32, generator=gen) for n in "PGB"}
    scalars = torch.tensor([0.05, 0.9, 0.01])  # lr, momentum, decay: one buffer, as optimizers
    order = [*feed, "lr", "momentum", "decay"]
    specs = {n: (tuple(t.shape), t.dtype) for n, t in feed.items()}
    specs.update({n: ((), torch.float32) for n in order[3:]})
    steps = runner.kernel_steps({**feed, **{n: scalars[0] for n in order[3:]}})
    plan = LaunchPlan(order, specs, steps, ["P_next", "B_next"], runner.op.aliases,
                      bound=[scalars[k] for k in range(3)])
    for lr in (0.05, 0.2):  # written into the bound buffer between calls
        scalars[0] = lr
        want = evaluate_all(runner.op, {**{n: t.clone() for n, t in feed.items()},
                                        "lr": scalars[0].clone(), "momentum": scalars[1].clone(),
                                        "decay": scalars[2].clone()})
        plan([feed[n] for n in "PGB"])
        torch.testing.assert_close(feed["P"], want["P_next"])
        torch.testing.assert_close(feed["B"], want["B_next"])
    with pytest.raises(ValueError, match="takes 3 inputs, got 6"):
        plan([feed[n] for n in "PGB"] + [scalars[k] for k in range(3)])
    with pytest.raises(ValueError, match="bound input must be a contiguous CPU tensor"):
        LaunchPlan(order, specs, steps, ["P_next", "B_next"], runner.op.aliases,
                   bound=[torch.zeros(2, 2).t()[0], scalars[1], scalars[2]])
    with pytest.raises(ValueError, match="written in place cannot be bound"):
        LaunchPlan(["G", "lr", "momentum", "decay", "P", "B"], specs, steps,
                   ["P_next", "B_next"], runner.op.aliases, bound=[feed["P"], feed["B"]])


# ---------------------------------------------------------------- optimizers


def _pair(model_seed: int = 0):
    torch.manual_seed(model_seed)
    model = torch.nn.Sequential(torch.nn.Linear(33, 64), torch.nn.GELU(), torch.nn.LayerNorm(64),
                                torch.nn.Linear(64, 10))
    return model, copy.deepcopy(model)


def _train(ours, theirs, uol_opt, torch_opt, steps: int, skip_bias_at: int = -1) -> float:
    """Same gradients into both models each step; the largest parameter difference seen."""
    gen = torch.Generator().manual_seed(2)
    worst = 0.0
    for step in range(steps):
        for p, q in zip(theirs.parameters(), ours.parameters()):
            g = torch.randn(p.shape, generator=gen, dtype=p.dtype)
            p.grad, q.grad = g.clone(), g.clone()
        if step == skip_bias_at:  # a parameter without a gradient keeps its state and step
            theirs[0].bias.grad = ours[0].bias.grad = None
        torch_opt.step()
        uol_opt.step()
        worst = max(worst, max((p - q).abs().max().item()
                               for p, q in zip(theirs.parameters(), ours.parameters())))
    return worst


@pytest.mark.parametrize("backend", ["c", "reference"])
def test_sgd_follows_torch(backend):
    theirs, ours = _pair()
    settings = dict(lr=0.05, momentum=0.9, weight_decay=1e-3)
    worst = _train(ours, theirs, SGD(ours.parameters(), backend=backend, **settings),
                   torch.optim.SGD(theirs.parameters(), **settings), 12, skip_bias_at=4)
    assert worst < 1e-5


@pytest.mark.parametrize("backend", ["c", "reference"])
def test_adamw_follows_torch_with_per_parameter_steps(backend):
    theirs, ours = _pair()
    settings = dict(lr=1e-2, betas=(0.8, 0.99), weight_decay=0.1)
    uol_opt = AdamW(ours.parameters(), backend=backend, **settings)
    torch_opt = torch.optim.AdamW(theirs.parameters(), **settings)
    assert _train(ours, theirs, uol_opt, torch_opt, 12, skip_bias_at=4) < 1e-5
    steps = [float(uol_opt.state[p]["step"]) for p in ours.parameters()]
    assert steps == [float(torch_opt.state[p]["step"]) for p in theirs.parameters()]
    assert steps[1] == 11.0 and steps[0] == 12.0


def test_adamw_counts_from_a_step_set_in_place_as_torch_does():
    theirs, ours = _pair()
    uol_opt, torch_opt = AdamW(ours.parameters()), torch.optim.AdamW(theirs.parameters())
    _train(ours, theirs, uol_opt, torch_opt, 3)
    for opt, model in ((uol_opt, ours), (torch_opt, theirs)):  # a restart of the schedule
        opt.state[model[0].weight]["step"].fill_(0.0)
    assert _train(ours, theirs, uol_opt, torch_opt, 3) < 1e-5
    assert float(uol_opt.state[ours[0].weight]["step"]) == 3.0
    assert float(uol_opt.state[ours[0].bias]["step"]) == 6.0


def test_adamw_updates_a_double_model_in_double():
    theirs, ours = _pair()
    theirs, ours = theirs.double(), ours.double()
    settings = dict(lr=1e-2, weight_decay=0.1)
    worst = _train(ours, theirs, AdamW(ours.parameters(), **settings),
                   torch.optim.AdamW(theirs.parameters(), **settings), 4)
    assert worst < 1e-12  # f32 arithmetic would be ~1e-7 off


def test_sgd_on_the_triton_backend_follows_torch():
    theirs, ours = _pair()
    settings = dict(lr=0.05, momentum=0.9)
    worst = _train(ours, theirs, SGD(ours.parameters(), backend="triton", **settings),
                   torch.optim.SGD(theirs.parameters(), **settings), 3)
    assert worst < 1e-5


def test_state_dicts_move_between_torch_and_uol():
    theirs, ours = _pair()
    torch_opt = torch.optim.AdamW(theirs.parameters(), lr=1e-2)
    uol_opt = AdamW(ours.parameters(), lr=1e-2)
    _train(ours, theirs, uol_opt, torch_opt, 3)
    uol_opt.load_state_dict(copy.deepcopy(torch_opt.state_dict()))  # both go on from it
    for p in ours.parameters():
        assert uol_opt.state[p]["exp_avg"].is_contiguous()
    assert _train(ours, theirs, uol_opt, torch_opt, 3) < 1e-5
    back = torch.optim.AdamW(ours.parameters(), lr=1e-2)
    back.load_state_dict(uol_opt.state_dict())
    assert float(back.state[next(ours.parameters())]["step"]) == 6.0


def test_update_bumps_versions_so_a_stale_backward_is_refused():
    layer = torch.nn.Linear(4, 3)
    opt = SGD(layer.parameters(), lr=0.1)
    layer(torch.randn(2, 4)).sum().backward()
    out = (layer.weight * 2).sum()  # saves nothing of weight; the next one does
    saved = (layer.weight ** 2).sum()
    opt.step()
    out.backward()
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        saved.backward()


def test_a_parameter_changed_after_the_first_step_gets_a_new_plan():
    layer = torch.nn.Linear(6, 5)
    opt = AdamW(layer.parameters(), lr=0.1)
    layer(torch.randn(3, 6)).sum().backward()
    opt.step()
    with torch.no_grad():  # resized and retyped behind the optimizer's back
        layer.weight.data = torch.zeros(4, 7, dtype=torch.float64)
    layer.weight.grad = torch.ones(4, 7, dtype=torch.float64)
    opt.state[layer.weight].clear()  # its old moments no longer fit
    opt.step()
    assert layer.weight.dtype == torch.float64 and torch.isfinite(layer.weight).all()
    assert torch.all(layer.weight < 0)  # stepped against a positive gradient


def test_rows_view_takes_long_rows_that_divide():
    assert rows_view(256 * 768) == (192, 1024)
    assert rows_view(768) == (3, 256)
    assert rows_view(10) == (1, 10)
    assert rows_view(7 * 16) == (7, 16)


def test_sgd_refuses_what_it_does_not_compute():
    with pytest.raises(ValueError, match="momentum > 0"):
        SGD(torch.nn.Linear(2, 2).parameters(), momentum=0.0)
    emb = torch.nn.Embedding(10, 4, sparse=True)
    opt = SGD(emb.parameters(), lr=0.1)
    emb(torch.tensor([1, 2])).sum().backward()
    with pytest.raises(RuntimeError, match="sparse"):
        opt.step()


def test_run_worker_verifies_by_value_then_times_in_place():
    """The Studio's Run: verified into fresh outputs, then timed as a donating caller runs it,
    on copies, so the reference's cached inputs stay as they were."""
    from uol_core.backends.c.route import emit_any
    from uol_core.ops import op_text
    from uol_core.runtime import worker

    sizes = {"R": 4, "C": 64}
    src = emit_any(load_op("sgd_momentum"), sizes, None, {"threads": 1})
    job = worker.make_job(src, op_text("sgd_momentum"), "sgd_momentum.odl", sizes, repeats=3,
                          min_seconds=0.0)
    result = worker.execute_job(job)
    assert result["status"] == "ok", result
    assert result["timed_in_place"] == ["B", "P"] and result["median_s"] > 0
    inputs, reference = worker._reference(job, load_op("sgd_momentum"))
    again = evaluate_all(load_op("sgd_momentum"), inputs)
    for name in reference:  # the inputs the reference came from were not updated by timing
        torch.testing.assert_close(again[name], reference[name])
