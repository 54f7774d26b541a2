"""The C backend computes what the reference evaluator computes, for every GEMM-family shape."""

import pytest
import torch

import uol_core
from uol_core.acg.fixtures import runnable_target
from uol_core.odl import parse
from uol_core.runtime.verify import compare

TARGET = runnable_target()
ISA = TARGET and ("avx2" if "avx2" in TARGET.isa else "vecext")


def _check(op, sizes, config=None, seed=0, calls=1):
    """Compile, then call `calls` times on fresh inputs, each result checked (a race between
    threads shows on warm calls far more often than on the first)."""
    k = uol_core.compile(op, shapes=sizes, target=TARGET, config=config)
    from uol_core.odl.shapes import shape_of
    for call in range(calls):
        gen = torch.Generator().manual_seed(seed + call)
        ins = {d.name: torch.randn(shape_of(k.op, d.name, k.sizes), generator=gen)
               for d in k.op.inputs}
        out = k(**ins)
        ref = uol_core.evaluate(k.op, **ins)
        outs = out if isinstance(out, dict) else {k.op.outputs[0].name: out}
        refs = ref if isinstance(ref, dict) else {k.op.outputs[0].name: ref}
        verdict = compare(outs, refs, k.kernel_source.meta["reduction_length"])
        assert verdict.ok, (k.config, f"call {call + 1}", verdict)
    return k


SHAPES = [(1, 1, 1), (1, 7, 3), (7, 1, 5), (13, 17, 11), (37, 53, 300), (64, 64, 64),
          (97, 31, 1031), (6, 16, 256), (130, 200, 7)]


@pytest.mark.parametrize("m,n,k", SHAPES)
def test_matmul_any_shape(m, n, k):
    _check("matmul", {"M": m, "N": n, "K": k})


@pytest.mark.parametrize("name", ["matmul_nt", "matmul_tn", "linear_bias", "linear_bias_relu",
                                  "linear_bias_gelu", "linear_bias_silu"])
def test_transposed_operands_and_epilogues(name):
    _check(name, {"M": 29, "N": 45, "K": 67})


@pytest.mark.parametrize("sizes", [{"M": 64, "N": 128, "K": 256}, {"M": 29, "N": 45, "K": 67},
                                   {"M": 9, "N": 7, "K": 5}],
                         ids=["whole 8x8 blocks", "ragged edges", "under one block"])
@pytest.mark.parametrize("config", ["path=packed,mr=6,nr=16,kc=64,mc=24",
                                    "path=direct,mr=6,nr=16,kc=64,mc=24,par=jr,threads=2",
                                    "isa=vecext,path=packed,mr=4,nr=16,kc=32,mc=16"])
def test_a_transposed_b_is_packed_by_blocks_and_edges(sizes, config):
    """B stored n-major (matmul_nt, a linear layer's dX = dY W^T) is packed by 8 x 8 register
    transposes where whole blocks fit and element by element on the edges."""
    if "isa=" not in config:
        config = f"isa={ISA}," + config
    _check("matmul_nt", sizes, config=config, calls=2)


def test_batched_matmul_splits_over_batch_or_panels():
    for par in ("batch", "jr", "ir"):
        _check("bmm", {"B": 3, "M": 19, "N": 40, "K": 23}, config={"par": par, "threads": 2})


@pytest.mark.parametrize("config", [
    "mr=6,nr=16,kc=64,mc=24,threads=1",   # several k blocks: partial sums then the epilogue
    "mr=4,nr=24,kc=64,mc=48,par=ir,threads=2,pf=8,ku=1",
    "mr=8,nr=8,kc=128,mc=96,par=jr,threads=2,ku=8",
    "isa=vecext,mr=4,nr=16,kc=64,mc=48",  # the portable vector-extension path
])
def test_configs_are_all_correct(config):
    if "isa=" not in config:
        config = f"isa={ISA}," + config
    _check("linear_bias_gelu", {"M": 53, "N": 71, "K": 200}, config=config, calls=4)


def test_residual_scaling_and_multi_statement_epilogue():
    op = parse("op fused(A: f32[M, K], B: f32[K, N], R: f32[M, N], s: f32[N]) -> Y: f32[M, N]:\n"
               "    t[m, n] = sum[k](A[m, k] * B[k, n]) * 0.5 + R[m, n]\n"
               "    Y[m, n] = silu(t[m, n]) * s[n] - 1\n", "fused.odl")
    _check(op, {"M": 33, "N": 19, "K": 130}, config="kc=64")


def test_two_outputs_are_both_stored():
    op = parse("op two(A: f32[M, K], B: f32[K, N]) -> (C: f32[M, N], D: f32[M, N]):\n"
               "    C[m, n] = sum[k](A[m, k] * B[k, n])\n"
               "    D[m, n] = relu(C[m, n])\n", "two.odl")
    k = _check(op, {"M": 9, "N": 10, "K": 11})
    assert set(k.kernel_source.meta["outputs"]) == {"C", "D"}


def test_strided_views_need_no_copy():
    k = uol_core.compile("matmul", target=TARGET)  # specialises on the first call
    a = torch.randn(40, 30).t()  # (30, 40), column-major
    b = torch.randn(50, 80)[:, ::2]  # (50, 40) with column stride 2
    with pytest.raises(uol_core.ShapeError):
        k(A=a, B=torch.randn(3, 3))
    b = torch.randn(40, 25)[:, ::1]
    assert torch.allclose(k(A=a, B=b), a @ b, atol=1e-4)


def test_out_tensor_is_written_in_place():
    k = uol_core.compile("matmul", shapes={"M": 5, "N": 6, "K": 7}, target=TARGET)
    a, b, c = torch.randn(5, 7), torch.randn(7, 6), torch.zeros(5, 6)
    assert k(A=a, B=b, out=c) is c
    assert torch.allclose(c, a @ b, atol=1e-5)


def test_line_map_points_at_odl_lines():
    k = uol_core.compile("linear_bias_gelu", shapes={"M": 8, "N": 8, "K": 8}, target=TARGET)
    src = k.kernel_source
    lines = src.text.splitlines()
    assert set(src.line_map) == set(range(1, len(lines) + 1))
    stmt_line = k.op.stmts[0].line
    gelu = [i + 1 for i, text in enumerate(lines) if "uol_erff(" in text and "f_Y" in text]
    assert gelu and all(src.odl_line(i) == stmt_line for i in gelu)
    fma = [i + 1 for i, text in enumerate(lines) if "fmadd" in text or "* (b" in text]
    assert all(src.odl_line(i) == stmt_line for i in fma)


def test_memory_budget_gives_a_clear_error(monkeypatch):
    monkeypatch.setenv("UOL_MEM_BUDGET_MB", "1")
    with pytest.raises(uol_core.ShapeError, match="budget"):
        uol_core.compile("matmul", shapes={"M": 1024, "N": 1024, "K": 1024}, target=TARGET)


def test_compile_error_quotes_the_generated_line():
    from uol_core.backends.base import KernelSource
    from uol_core.runtime.build import BuildError, build
    src = KernelSource("int f(void) {\n  return undefined_name;\n}\n", "c", "f", "broken",
                       {"isa": "vecext"}, {1: 1, 2: 7, 3: 1})
    with pytest.raises(BuildError, match=r"line 2 \(implements ODL line 7\).*undefined_name"):
        build(src)


@pytest.mark.parametrize("config", ["mr=6,mc=256,path=packed,par=jr", "mr=4,kc=130,ku=4"])
def test_overrides_that_break_packing_are_refused_with_the_constraint_named(config):
    # mc=256 with mr=6 once overran the packed A panel (heap corruption, then a crash); the
    # direct path (the model's choice at N=64) packs no A, so the packed path is asked for.
    with pytest.raises(ValueError, match="divisibility"):
        uol_core.compile("matmul", shapes={"A": (512, 512), "B": (512, 64)}, config=config)


def test_a_split_override_rederives_nc_unless_it_names_it():
    """The model's nc for a row split is all of N; a jr split hands out nc-column chunks, so
    keeping it would leave one chunk and one busy thread (2048^3 ran at 1-thread speed)."""
    shapes = {"A": (512, 512), "B": (512, 512)}
    jr = uol_core.compile("matmul", shapes=shapes, target=TARGET, config="par=jr,threads=2")
    assert jr.config["nc"] < 512
    fixed = uol_core.compile("matmul", shapes=shapes, target=TARGET,
                             config="par=jr,threads=2,nc=512")
    assert fixed.config["nc"] == 512


@pytest.mark.parametrize("path", ["packed", "direct"])
@pytest.mark.parametrize("par", ["jr", "ir", "batch", "k"])
def test_every_split_override_is_correct_on_both_paths(path, par):
    """Overrides may leave the space (they explore); each path x split the config accepts must
    still compute the right thing with two threads, on a batched product with edges in M, N, K
    and several k blocks (a direct-path row split once ran every thread over every row)."""
    if par == "k" and path == "packed":
        with pytest.raises(ValueError, match="par=k"):
            _check("bmm", {"B": 3, "M": 21, "N": 37, "K": 150},
                   config=f"isa={ISA},path={path},par={par},threads=2")
        return
    for name, sizes in (("bmm", {"B": 3, "M": 21, "N": 37, "K": 150}),
                        ("linear_bias_gelu", {"M": 53, "N": 71, "K": 200})):
        _check(name, sizes, config=f"isa={ISA},path={path},par={par},threads=2,mr=4,kc=64,mc=24",
               calls=8)
