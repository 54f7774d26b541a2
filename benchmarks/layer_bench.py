"""Per-layer benchmark: each layer type the model zoos use, UOL's compiled kernel against torch's
own kernel for it (oneDNN / MKL / its native CPU kernels), calls alternated round by round in one
process; writes docs/benchmarks/layers.json.

    python benchmarks/layer_bench.py [--repeat 15 --only linear --packing both --out FILE]

Each layer is an `nn.Module` (nn.Conv2d, nn.Linear, nn.LayerNorm, nn.GroupNorm, scaled dot-product
attention) imported whole with `import_model` and compiled with `compile_graph`, as a model's layers
are. Both sides allocate their output on every call (the compiled graph returns a fresh tensor, as
the module does), so the ratio compares kernels under the same memory policy. The ratio of a row is
torch's median time over UOL's; its spread is the interquartile range of the per-round ratios (each
round calls every contender once, starting at the next one each round), which cancels most of the
load other processes put on shared cores. `--packing both` adds, for GEMM layers, UOL with the
constant weights packed once at compile time against UOL packing them on every call.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from uol_core.graph.export_import import import_model  # noqa: E402
from uol_core.graph.run import compile_graph, max_error  # noqa: E402
from uol_core.runtime.turns import timed_turn  # noqa: E402

OUT = ROOT / "docs" / "benchmarks" / "layers.json"
MARKDOWN = ROOT / "docs" / "benchmarks" / "layers.md"


class Attention(nn.Module):
    """Scaled dot-product attention over [batch, heads, seq, dim] (a transformer's core)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v)


@dataclass(frozen=True)
class Layer:
    """One benchmark row: a module, its inputs and its floating-point work."""

    kind: str
    label: str
    build: Callable[[], tuple[nn.Module, tuple[torch.Tensor, ...]]]
    flops: float


def _conv(cin: int, cout: int, kernel: int, stride: int, size: int, groups: int = 1):
    def build():
        module = nn.Conv2d(cin, cout, kernel, stride, kernel // 2, groups=groups, bias=True)
        return module, (torch.randn(1, cin, size, size),)
    out = (size + 2 * (kernel // 2) - kernel) // stride + 1
    return build, 2.0 * cout * out * out * (cin // groups) * kernel * kernel


def _linear(m: int, k: int, n: int):
    return (lambda: (nn.Linear(k, n), (torch.randn(m, k),))), 2.0 * m * k * n


def _attention(seq: int, heads: int, dim: int):
    def build():
        return Attention(), tuple(torch.randn(1, heads, seq, dim) for _ in range(3))
    return build, 4.0 * heads * seq * seq * dim


def _norm(module_fn, shape: tuple[int, ...]):
    return (lambda: (module_fn(), (torch.randn(*shape),))), 8.0 * torch.Size(shape).numel()


def layers(size: str) -> list[Layer]:
    """The rows: ResNet-50 / MobileNetV2 convolutions at batch 1, transformer linears at the
    token counts models run at (1 and 8 decode steps, 128 and 197 tokens, 1024), attention,
    and the norms. `size="tiny"` keeps every kind at toy sizes (for the test)."""
    if size == "tiny":
        convs = [("conv3x3", "3x3 8->8 @8x8", _conv(8, 8, 3, 1, 8)),
                 ("conv1x1", "1x1 16->8 @8x8", _conv(16, 8, 1, 1, 8)),
                 ("depthwise3x3", "dw3x3 16 @8x8", _conv(16, 16, 3, 1, 8, groups=16)),
                 ("strided3x3", "3x3/s2 8->8 @8x8", _conv(8, 8, 3, 2, 8))]
        linears = [(m, 32, 64) for m in (1, 8)]
        attention = [(16, 2, 8)]
        norms = [("layernorm", "[1, 16, 32]", _norm(lambda: nn.LayerNorm(32), (1, 16, 32))),
                 ("groupnorm", "G4 [1, 16, 8, 8]", _norm(lambda: nn.GroupNorm(4, 16), (1, 16, 8, 8)))]
    else:
        convs = [("conv3x3", "3x3 64->64 @56x56 (ResNet-50 stage 1)", _conv(64, 64, 3, 1, 56)),
                 ("conv1x1", "1x1 256->64 @56x56 (ResNet-50 stage 1)", _conv(256, 64, 1, 1, 56)),
                 ("depthwise3x3", "dw3x3 144 @56x56 (MobileNetV2)", _conv(144, 144, 3, 1, 56, groups=144)),
                 ("strided3x3", "3x3/s2 128->128 @56x56 (ResNet-50 stage 2)", _conv(128, 128, 3, 2, 56))]
        linears = [(m, k, n) for m in (1, 8, 128, 197, 1024) for k, n in ((768, 3072), (3072, 768))]
        attention = [(s, 12, 64) for s in (128, 512, 1024)]
        norms = [("layernorm", "768 over [1, 197, 768] (ViT-B)", _norm(lambda: nn.LayerNorm(768), (1, 197, 768))),
                 ("groupnorm", "G32 over [1, 256, 56, 56]", _norm(lambda: nn.GroupNorm(32, 256), (1, 256, 56, 56)))]
    rows = [Layer(kind, label, *made) for kind, label, made in convs]
    rows += [Layer("linear", f"M={m} K={k} N={n}", *_linear(m, k, n)) for m, k, n in linears]
    rows += [Layer("attention", f"S={s} heads={h} dim={d}", *_attention(s, h, d)) for s, h, d in attention]
    rows += [Layer(kind, label, *made) for kind, label, made in norms]
    return rows


def alternated(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, list[float]]:
    """Seconds of each timed call, contenders alternated, each round starting at the next one (in
    a fixed order the first always runs right after the last); two warm-up calls each, and
    untimed lead-in calls for 50 ms before each timed one (runtime.turns)."""
    for fn in fns.values():
        fn()
        fn()
    times: dict[str, list[float]] = {name: [] for name in fns}
    order = list(fns.items())
    for turn in range(rounds):
        for name, fn in order[turn % len(order):] + order[:turn % len(order)]:
            times[name].append(timed_turn(fn))  # its lead-in calls take the hand-over
    return times


def ratio_stats(base: list[float], ours: list[float]) -> dict:
    """base/ours per round: the median ratio, and its interquartile range as the spread."""
    ratios = sorted(b / o for b, o in zip(base, ours))
    if len(ratios) >= 4:
        q1, med, q3 = statistics.quantiles(ratios, n=4)
    else:
        q1, med, q3 = ratios[0], statistics.median(ratios), ratios[-1]
    return {"ratio": statistics.median(base) / statistics.median(ours), "ratio_round_median": med,
            "ratio_q1": q1, "ratio_q3": q3}


def compiled_layer(module: nn.Module, inputs: tuple[torch.Tensor, ...], prepack: bool):
    """The layer imported whole and compiled; its call on `inputs` and max relative error."""
    graph = import_model(module, *inputs)
    ours = compile_graph(graph, "c", "host")
    ours.verify = False  # checked below into the row: a mismatch is a row, not an exception
    if hasattr(ours, "prepack"):
        ours.prepack = prepack
    env = dict(zip(graph.inputs, inputs))
    with torch.no_grad():
        error = max_error(ours(env), dict(zip(graph.outputs, (module(*inputs),))))
    engines = sorted({r.engine for r in ours.routes.values()})
    return (lambda: ours(env)), error, engines, len(ours.plan.groups)


def run_layer(layer: Layer, rounds: int, packing: str) -> dict:
    """One row: UOL (and UOL without packed weights, with `packing="both"`) against torch."""
    torch.manual_seed(0)
    module, inputs = layer.build()
    module.eval()
    ours, error, engines, groups = compiled_layer(module, inputs, packing != "off")
    with torch.no_grad():
        fns = {"uol": ours, "torch": lambda: module(*inputs)}
        if packing == "both" and layer.kind == "linear":
            fns["uol_unpacked"] = compiled_layer(module, inputs, False)[0]
        times = alternated(fns, rounds)
    ms = {name: statistics.median(v) * 1e3 for name, v in times.items()}
    row = {"kind": layer.kind, "layer": layer.label, "flops": layer.flops, "engines": engines,
           "groups": groups, "verified": error <= 1e-3, "max_rel_error": error, "rounds": rounds,
           "uol_ms": ms["uol"], "torch_ms": ms["torch"],
           "uol_gflops": layer.flops / ms["uol"] / 1e6, "torch_gflops": layer.flops / ms["torch"] / 1e6,
           **ratio_stats(times["torch"], times["uol"])}
    if "uol_unpacked" in times:
        row["uol_unpacked_ms"] = ms["uol_unpacked"]
        row["packed_vs_unpacked"] = ratio_stats(times["uol_unpacked"], times["uol"])
        m, k, n = (int(part.split("=")[1]) for part in layer.label.split())
        row["kernel_packing"] = packing_share(m, k, n, max(20, 4 * rounds))
    return row


def packing_share(m: int, k: int, n: int, rounds: int) -> dict:
    """The GEMM kernel of a linear layer alone (no graph, no Python between calls but the
    ctypes call), packing B per call against reading it packed once, alternated: the share of
    the call that packing takes, from each side's fastest call (the least disturbed by other
    processes) and from the medians. The chosen config on one thread: on a host busier than
    its cores a two-thread kernel waits for a descheduled thread at its end, which swamps the
    work; per thread the packing is the same (a row split packs all of B in each thread, so
    there the share on two threads is larger)."""
    from uol_core.backends import get_backend
    from uol_core.backends.c.gemm.prepacked import emit_prepacked, pack_b
    from uol_core.odl.shapes import shape_of
    from uol_core.ops import load_op
    from uol_core.runtime.build import build
    from uol_core.runtime.native import NativeKernel

    backend, op = get_backend("c"), load_op("linear_bias")
    plan = backend.plan(op, {"M": m, "K": k, "N": n}, "host")
    cfg = backend.choose(plan).config.replace(threads=1)
    names = [d.name for d in op.inputs] + list(plan.detail.stores)
    shapes = {name: shape_of(op, name, plan.sizes) for name in names}
    tensors = {name: torch.randn(shapes[name]) for name in names}
    rhs = plan.detail.rhs.tensor
    packed = dict(tensors)
    packed[rhs] = pack_b(tensors[rhs], plan.detail, cfg).as_strided(shapes[rhs], tensors[rhs].stride())
    kernels = {}
    for label, source in (("per_call", backend.emit(plan, cfg)),
                          ("prepacked", emit_prepacked(plan.detail, cfg, plan.target))):
        kernels[label] = NativeKernel(build(source), source.entry, source.meta["args"], shapes)
    times = alternated({"per_call": lambda: kernels["per_call"](tensors),
                        "prepacked": lambda: kernels["prepacked"](packed)}, rounds)
    best = {name: min(v) * 1e6 for name, v in times.items()}
    median = {name: statistics.median(v) * 1e6 for name, v in times.items()}
    return {"config": cfg.key(), "rounds": rounds, "best_us": best, "median_us": median,
            "share_best": 1 - best["prepacked"] / best["per_call"],
            "share_median": 1 - median["prepacked"] / median["per_call"]}


def host_record() -> dict:
    """CPU model, widest vector ISA, threads, the probed fp32 peak (HFL host target), the BLAS
    and OpenMP pools torch runs on (threadpoolctl) and the load average."""
    from threadpoolctl import threadpool_info

    from uol_core.hfl import load_target
    from uol_core.hfl.sysinfo import host_info, widest_vector_isa

    info = host_info()
    isa = widest_vector_isa(info.flags)
    target = load_target("host")
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or platform.machine())
    return {"cpu": cpu, "isa": f"{isa.get('flag', 'unknown')} ({isa.get('vector_bits', '?')}-bit)",
            "threads": torch.get_num_threads(), "torch": torch.__version__,
            "probed_fp32_peak_gflops": target.peak_gflops.get("fp32"),
            "threadpools": [{k: p.get(k) for k in ("user_api", "internal_api", "num_threads", "version")}
                            for p in threadpool_info()]}


def table(report: dict) -> list[str]:
    """The markdown section of one run: command, host, load, one row per layer."""
    host = report["host"]
    lines = [f"Command: `{report['command']}` ({report['date']}). Host: {host['cpu']}, vector ISA "
             f"{host['isa']}, {host['threads']} torch threads, probed fp32 peak "
             f"{host['probed_fp32_peak_gflops']:.0f} GFLOP/s, torch {host['torch']}. Load average "
             f"(1, 5, 15 min) at the start {_load(report['load_average_start'])}, at the end "
             f"{_load(report['load_average_end'])} on {os.cpu_count()} CPUs.", "",
             "x torch: torch's median call over UOL's; [q1, q3]: the interquartile range of the "
             "per-round ratios (the spread).", "",
             "| layer | shape | UOL ms | torch ms | x torch [q1, q3] | UOL GFLOP/s | verified |",
             "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {r['kind']} | {r['layer']} | {r['uol_ms']:.3f} | {r['torch_ms']:.3f} | "
                     f"{r['ratio']:.2f} [{r['ratio_q1']:.2f}, {r['ratio_q3']:.2f}] | "
                     f"{r['uol_gflops']:.1f} | {r['verified']} |")
    lines += ["", f"Median over the rows: {report['median_ratio']:.2f}x torch."]
    return lines


def packing_table(report: dict) -> list[str]:
    """The linear rows of a `--packing both` run: packed once against packed per call."""
    lines = [f"Command: `{report['command']}` ({report['date']}); load average at the start "
             f"{_load(report['load_average_start'])}, at the end {_load(report['load_average_end'])}.",
             "", "Graph: the compiled layer with its weight packed once over the same layer "
             "packing per call (alternated, median of per-call times; [q1, q3] of the per-round "
             "ratios). Kernel: the GEMM alone on one thread, fastest call of each side, and the "
             "share of the per-call kernel's time that reading B packed once saves: the packing "
             "where the kernel packs B per call (M > MR, and the packed path), and at M <= MR, "
             "where it reads B in place from rows N floats apart, the cost of those strided "
             "reads against contiguous panels.", "",
             "| shape | x torch (packed once) | graph: packed once / per call [q1, q3] | kernel "
             "us per call / packed once | saved of the kernel | config |",
             "|---|---|---|---|---|---|"]
    for r in report["rows"]:
        if "packed_vs_unpacked" not in r:
            continue
        pv, kp = r["packed_vs_unpacked"], r["kernel_packing"]
        lines.append(f"| {r['layer']} | {r['ratio']:.2f} | {pv['ratio']:.2f} [{pv['ratio_q1']:.2f}, "
                     f"{pv['ratio_q3']:.2f}] | {kp['best_us']['per_call']:.0f} / "
                     f"{kp['best_us']['prepacked']:.0f} | {kp['share_best']:.0%} | "
                     f"`{kp['config']}` |")
    return lines


def _without_out(argv: list[str]) -> list[str]:
    """The arguments that say what was measured (not where the JSON went)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--out":
            skip = True
        elif not arg.startswith("--out="):
            out.append(arg)
    return out


def _load(values) -> str:
    return ", ".join(f"{v:.1f}" for v in values)


def write_markdown(heading: str, lines: list[str], path: Path = MARKDOWN) -> None:
    """Replace the `## heading` section of `path` (or append it), keeping the others."""
    import re

    section = "\n".join([f"## {heading}", "", *lines, ""])
    text = path.read_text() if path.exists() else "# Per-layer benchmark\n\n"
    pattern = re.compile(rf"## {re.escape(heading)}\n.*?(?=\n## |\Z)", re.S)
    text = pattern.sub(lambda _: section, text) if pattern.search(text) else \
        text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=15, help="alternated rounds per row")
    ap.add_argument("--size", choices=("bench", "tiny"), default="bench")
    ap.add_argument("--only", default="", help="comma-separated kinds (conv3x3, linear, ...)")
    ap.add_argument("--packing", choices=("on", "off", "both"), default="on",
                    help="UOL's GEMMs with weights packed once (on), per call (off), or both timed")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--render", type=Path, default=None, help="write the docs/benchmarks/"
                    "layers.md section of this JSON (a whole run: the table; a --packing both "
                    "run of the linear rows: the packing table) and exit")
    args = ap.parse_args(argv)
    if args.render:
        report = json.loads(args.render.read_text())
        if report["packing"] == "both" and {r["kind"] for r in report["rows"]} == {"linear"}:
            write_markdown("Weights packed once: linear layers", packing_table(report))
        else:
            write_markdown("Every layer against torch's kernel", table(report))
        return report
    kinds = set(filter(None, args.only.split(",")))
    report = {"benchmark": "per-layer: UOL compiled layer against torch's kernel (CPU fp32, batch 1)",
              "command": shlex.join(["python", "benchmarks/layer_bench.py", *_without_out(
                  argv if argv is not None else sys.argv[1:])]),
              "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "host": host_record(),
              "load_average_start": list(os.getloadavg()), "packing": args.packing, "rows": []}
    for layer in layers(args.size):
        if kinds and layer.kind not in kinds:
            continue
        row = run_layer(layer, args.repeat, args.packing)
        report["rows"].append(row)
        extra = (f" | packed/unpacked {row['packed_vs_unpacked']['ratio']:.2f}x, packing "
                 f"{row['kernel_packing']['share_best']:.0%} of the kernel's fastest call") \
            if "packed_vs_unpacked" in row else ""
        print(f"{row['kind']:<13} {row['layer']:<44} uol {row['uol_ms']:8.3f} ms | torch "
              f"{row['torch_ms']:8.3f} ms | {row['ratio']:.2f}x [{row['ratio_q1']:.2f}, "
              f"{row['ratio_q3']:.2f}] | verified {row['verified']}{extra}", flush=True)
    report["load_average_end"] = list(os.getloadavg())
    ratios = [r["ratio"] for r in report["rows"]]
    report["median_ratio"] = statistics.median(ratios) if ratios else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"median {report['median_ratio']:.2f}x torch; wrote {args.out}")
    return report


if __name__ == "__main__":
    main()
