"""Constant weights packed once: the planned run reads each GEMM's parameter B as panels packed
at planning, and an in-place write to a weight (of the module or of the graph) is seen by the
very next call."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from uol_core.acg.config import TileConfig
from uol_core.acg.fixtures import fixed_target
from uol_core.backends import get_backend
from uol_core.backends.c import emit
from uol_core.backends.c.gemm.prepacked import (
    NotPrepackable,
    emit_prepacked,
    pack_b,
    packed_numel,
    prepack_refusal,
)
from uol_core.graph.export_import import import_model
from uol_core.graph.run import compile_graph, make_inputs
from uol_core.odl.shapes import shape_of
from uol_core.ops import load_op
from uol_core.runtime.build import build
from uol_core.runtime.native import NativeKernel


def _compiled(module: nn.Module, x: torch.Tensor, prepack: bool = True):
    graph = import_model(module.eval(), x)
    compiled = compile_graph(graph, "c")
    compiled.prepack = prepack
    return graph, compiled, {next(iter(graph.inputs)): x}


def _error(compiled, graph, env, module, x) -> float:
    with torch.no_grad():
        got = compiled(env)[graph.outputs[0]]
        want = module(x)
    return float((got - want).abs().max() / want.abs().max())


# M = 1 and 8 (direct path, B streamed unpacked per call), 40 (direct, panels reused), 300 (packed)
@pytest.mark.parametrize("rows", [1, 8, 40, 300])
def test_weight_written_in_place_is_never_read_stale(rows):
    torch.manual_seed(rows)
    module = nn.Sequential(nn.Linear(96, 136), nn.GELU(), nn.Linear(136, 72))
    x = torch.randn(rows, 96)
    graph, compiled, env = _compiled(module, x)
    assert _error(compiled, graph, env, module, x) < 1e-5
    runner = compiled.runner(env)
    assert runner.stats.prepacked["packed_weights"] == 2, runner.stats.prepacked
    with torch.no_grad():
        module[0].weight.add_(1)
    assert _error(compiled, graph, env, module, x) < 1e-5
    with torch.no_grad():
        module[2].weight.mul_(-0.5)
        module[2].bias.add_(3)
    assert _error(compiled, graph, env, module, x) < 1e-5
    assert compiled.runner(env) is runner  # the same plan, its packed weights refreshed
    assert [w.repacks for w in runner.prepacker.weights] == [1, 1]


def test_graph_parameter_written_in_place_is_repacked():
    module = nn.Linear(64, 80)
    x = torch.randn(24, 64)
    graph, compiled, _ = _compiled(module, x)
    env = make_inputs(graph, 0)
    env[next(iter(graph.inputs))] = x
    weight = next(n for n, spec in graph.params.items() if len(spec.shape) == 2)
    compiled(env)
    with torch.no_grad():
        env[weight].mul_(2)  # the graph's own parameter (the module's weight transposed)
        want = x @ env[weight] + env[next(n for n in graph.params if n != weight)]
    got = compiled(env)[graph.outputs[0]]
    assert float((got - want).abs().max()) < 1e-4


def test_sibling_projections_merged_then_one_written():
    class Projections(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.q, self.k, self.v = nn.Linear(32, 32), nn.Linear(32, 32), nn.Linear(32, 32)

        def forward(self, x):
            shape = (x.shape[0], 4, 8)
            return self.q(x).view(shape) * self.k(x).view(shape) + self.v(x).view(shape)

    module = Projections()
    x = torch.randn(16, 32)
    graph, compiled, env = _compiled(module, x)
    assert any(d["merged"] for d in compiled.plan.siblings)
    assert _error(compiled, graph, env, module, x) < 1e-5
    with torch.no_grad():
        module.k.weight.add_(0.25)
    assert _error(compiled, graph, env, module, x) < 1e-5


def test_packed_copies_are_accounted_and_switch_off():
    module = nn.Linear(100, 70)
    x = torch.randn(40, 100)
    graph, compiled, env = _compiled(module, x)
    compiled(env)
    stats = compiled.runner(env).stats
    cfg = TileConfig.from_config(compiled.routes["linear_op"].kernel.config)
    npad = -(-70 // cfg.nr) * cfg.nr
    assert stats.packed_bytes == 100 * npad * 4
    assert stats.to_dict()["planned_bytes"] == stats.memory.arena_bytes + stats.packed_bytes
    graph, unpacked, env = _compiled(module, x, prepack=False)
    assert _error(unpacked, graph, env, module, x) < 1e-5
    assert unpacked.runner(env).stats.packed_bytes == 0


CONFIGS = [  # both drivers, every split, ragged N and K, B stored [N, K]
    ("matmul", {"M": 1, "K": 300, "N": 200}, TileConfig("avx512", 2, 64, 64, 2, 192, 4, 8, "jr", 2, "direct")),
    ("matmul", {"M": 30, "K": 500, "N": 333}, TileConfig("avx512", 8, 32, 128, 64, 96, 4, 0, "k", 2, "direct")),
    ("linear_bias_gelu", {"M": 100, "K": 77, "N": 70}, TileConfig("avx512", 5, 48, 128, 100, 96, 4, 0, "ir", 2, "direct")),
    ("matmul", {"M": 300, "K": 500, "N": 333}, TileConfig("avx512", 8, 32, 128, 64, 96, 4, 0, "ir", 2, "packed")),
    ("matmul", {"M": 300, "K": 500, "N": 333}, TileConfig("avx2", 6, 16, 100, 60, 96, 4, 8, "jr", 2, "packed")),
    ("matmul_nt", {"M": 300, "K": 200, "N": 130}, TileConfig("avx512", 8, 32, 128, 64, 96, 4, 0, "ir", 2, "packed")),
]


@pytest.mark.parametrize("name, sizes, cfg", CONFIGS)
def test_prepacked_kernel_equals_packing_per_call(name, sizes, cfg):
    backend = get_backend("c")
    op = load_op(name)
    plan = backend.plan(op, sizes, "host")
    if cfg.isa not in plan.target.isa and not (cfg.isa == "avx512" and "avx512f" in plan.target.isa):
        pytest.skip(f"host has no {cfg.isa}")
    shapes = {n: shape_of(op, n, plan.sizes) for n in [d.name for d in op.inputs] + list(plan.detail.stores)}
    gen = torch.Generator().manual_seed(0)
    inputs = {d.name: torch.randn(shapes[d.name], generator=gen) for d in op.inputs}
    outs = {}
    for prepacked in (False, True):
        src = emit_prepacked(plan.detail, cfg, plan.target) if prepacked else backend.emit(plan, cfg)
        kernel = NativeKernel(build(src), src.entry, src.meta["args"], shapes)
        args = dict(inputs)
        if prepacked:
            rhs = plan.detail.rhs.tensor
            packed = pack_b(inputs[rhs], plan.detail, cfg)
            assert packed.numel() == packed_numel(plan.detail, cfg)
            args[rhs] = packed.as_strided(shapes[rhs], inputs[rhs].stride())
        out_name = src.meta["outputs"][0]
        args[out_name] = torch.full(shapes[out_name], float("nan"))
        kernel(args)
        outs[prepacked] = args[out_name]
    assert torch.equal(outs[True], outs[False])  # same panels, same sums, same order


def test_refusals_name_their_reason():
    backend = get_backend("c")
    plan = backend.plan(load_op("bmm"), {"B": 2, "M": 8, "N": 8, "K": 8}, "host").detail
    cfg = TileConfig("avx2", 4, 8, 64, 24, 8, 1, 0, "batch", 1)
    assert "batched" in prepack_refusal(plan, cfg)
    with pytest.raises(NotPrepackable, match="bmm"):
        pack_b(torch.randn(2, 8, 8), plan, cfg)


TARGETS = {"avx512": fixed_target("test-avx512", isa=("avx512f", "avx2", "fma"), vector_bits=512,
                                  registers=32)}
GOLDEN = {
    "direct_avx512": ("linear_bias", {"M": 8, "N": 96, "K": 77},
                      TileConfig("avx512", 8, 32, 64, 8, 96, 4, 8, "jr", 2, "direct")),
    "packed_avx512": ("linear_bias_gelu", {"M": 100, "N": 64, "K": 77},
                      TileConfig("avx512", 14, 32, 256, 112, 64, 4, 8, "ir", 2, "packed")),
}


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_prepacked_kernel_text_matches_golden(case, golden):
    name, sizes, cfg = GOLDEN[case]
    backend = get_backend("c")
    plan = backend.plan(load_op(name), sizes, TARGETS["avx512"])
    text = emit_prepacked(plan.detail, cfg, TARGETS["avx512"]).text
    assert "uol_pack_b" not in text and f"#define NPAD {-(-sizes['N'] // cfg.nr) * cfg.nr}" in text
    assert text != emit(load_op(name), cfg, TARGETS["avx512"], sizes).text
    golden(f"c/gemm_prepacked/{case}.c", text)


def test_conv_filters_packed_once_and_batch_norm_update_seen():
    torch.manual_seed(3)
    module = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
                           nn.Conv2d(16, 12, 1))
    x = torch.randn(1, 8, 10, 10)
    graph, compiled, env = _compiled(module, x)
    assert _error(compiled, graph, env, module, x) < 1e-5
    runner = compiled.runner(env)
    assert runner.stats.prepacked["packed_weights"] == 2, runner.stats.prepacked
    with torch.no_grad():  # folded into the first filter at import: the import runs again
        module[1].running_var.mul_(4)
        module[3].weight.add_(0.5)
    assert _error(compiled, graph, env, module, x) < 1e-5
    assert compiled.runner(env) is runner
