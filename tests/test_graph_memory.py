"""The memory-planned graph runtime: liveness-based arena offsets, and planned runs of zoo models
that match torch, reuse memory, keep outputs apart from the arena and take no page fault."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import pytest
import torch

from uol_core.graph.export_import import export_module
from uol_core.graph.memory_plan import Buffer, plan_memory
from uol_core.graph.planned import Segment, page_faults
from uol_core.graph.run import compile_graph, make_inputs, max_error

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from uol_core.graph.zoo import build


def _assert_no_live_overlap(plan) -> None:
    for a in plan.buffers:
        for b in plan.buffers:
            if a.name < b.name and a.overlaps(b):
                a0, b0 = plan.offsets[a.name], plan.offsets[b.name]
                assert a0 + a.nbytes <= b0 or b0 + b.nbytes <= a0, (a, b, a0, b0)


def test_a_chain_reuses_the_memory_of_dead_buffers():
    # h1 -> h2 -> h3 -> h4: each buffer dies when the next-but-one is written
    chain = [Buffer(f"h{i}", 4096, i, i + 1) for i in range(4)]
    plan = plan_memory(chain)
    assert plan.naive_bytes == 4 * 4096
    assert plan.arena_bytes == 2 * 4096 == plan.lower_bound_bytes
    assert plan.offsets["h0"] == plan.offsets["h2"] and plan.offsets["h1"] == plan.offsets["h3"]
    assert "h2 reuses the memory of h0" in "\n".join(plan.explain())


def test_buffers_alive_together_never_share_and_offsets_are_aligned():
    rng = random.Random(7)
    for _ in range(50):
        buffers = []
        for i in range(rng.randint(1, 25)):
            first = rng.randint(0, 30)
            buffers.append(Buffer(f"b{i}", rng.randint(1, 10_000), first, first + rng.randint(0, 8)))
        plan = plan_memory(buffers)
        _assert_no_live_overlap(plan)
        assert all(off % plan.alignment == 0 for off in plan.offsets.values())
        assert plan.lower_bound_bytes <= plan.arena_bytes <= plan.naive_bytes


def test_bad_buffers_are_refused():
    with pytest.raises(ValueError, match="first <= last"):
        plan_memory([Buffer("x", 8, 3, 1)])
    with pytest.raises(ValueError, match="unique"):
        plan_memory([Buffer("x", 8, 0, 1), Buffer("x", 8, 0, 1)])


def _compiled(name: str, backend: str = "c"):
    module, x = build(name, "small", batch=2)
    graph = export_module(module, x)
    compiled = compile_graph(graph, backend)
    env = make_inputs(graph, 0)
    env[next(iter(graph.inputs))] = x
    with torch.no_grad():
        expected = dict(zip(graph.outputs, (module(x),)))
    return graph, compiled, env, expected


@pytest.mark.parametrize("name", ["llama_block", "vit_block"])
def test_planned_run_matches_torch_and_plans_less_than_naive(name):
    graph, compiled, env, expected = _compiled(name)
    first = compiled(env)
    second = compiled(env)
    assert max_error(first, expected) <= 1e-4 and max_error(second, expected) <= 1e-4
    runner = compiled.runner(env)
    memory = runner.stats.memory
    assert 0 < memory.arena_bytes < memory.naive_bytes
    arena = runner.arena.bytes
    lo, hi = arena.data_ptr(), arena.data_ptr() + arena.numel()
    for out in (first, second):  # outputs are the caller's: never inside the arena
        assert all(not lo <= t.data_ptr() < hi for t in out.values())
    assert first[graph.outputs[0]].data_ptr() != second[graph.outputs[0]].data_ptr()
    unplanned = compile_graph(graph, "c")
    unplanned.planned = False
    assert max_error(unplanned(env), expected) <= 1e-4


def test_planned_run_writes_caller_buffers_and_takes_no_page_faults():
    graph, compiled, env, expected = _compiled("resnet_bottleneck")
    name = graph.outputs[0]
    out = {name: torch.empty_like(expected[name])}
    result = compiled(env, out=out)
    assert result[name] is out[name] and max_error(out, expected) <= 1e-4
    runner = compiled.runner(env)
    assert any(isinstance(s, Segment) and len(s.kernels) > 1 for s in runner.steps)
    before = page_faults()
    for _ in range(20):
        compiled(env, out=out)
    assert (page_faults() - before) / 20 < 1  # steady state: the arena was touched at build
    overhead = runner.overhead_us(calls=50)
    assert overhead["per_kernel_us"] is not None and overhead["per_kernel_us"] > 0


def test_new_parameters_or_shapes_build_a_new_plan():
    graph, compiled, env, _ = _compiled("silu_mlp")
    compiled(env)
    first = compiled.runner(env)
    changed = dict(env)
    param = next(iter(graph.params))
    changed[param] = env[param] * 2  # the plan must not keep reading the old weights
    with torch.no_grad():
        unplanned = compile_graph(graph, "c")
        unplanned.planned = False
        want = unplanned(changed)
    assert max_error(compiled(changed), want) <= 1e-5
    assert compiled.runner(changed) is not first
