"""The direct convolution path's register tile: the platform file's tile for the host's ISA
against others, in one run, calls alternated.

Run: `.venv/bin/python benchmarks/conv_tile.py [--rounds N] [--models a,b] [--batch 1]
[--tiles 4x3,...]`. `--tiles` names the alternatives (MR filter rows x NV input vectors); the
default is the tile each platform's choice replaced (AVX2: 4 x 3; AVX-512: 8 x 3 alone,
before the platform listed others for the model to choose from per layer). Writes docs/benchmarks/conv_tile.json (conv_tile_<isa>.json off AVX2). Each layer is
a compiled graph of one convolution and its activation (weights packed once, as in a model);
each model the library zoo's compiled graph, all built from the same code with only
`tiles["conv_direct"]` of the host's platform swapped (route caches cleared each way). ONNX
Runtime runs in the same rounds, so the models' ratio to the strongest deployment runtime is
measured under the same load. Turns as `uol graph run --peers` takes them (graph/run.py
`interleaved_times`): untimed calls before each timed one (runtime/turns.py: 50 ms, 250 ms
where ONNX Runtime takes turns), so a pool the previous contender left spinning does not land
on it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from contextlib import contextmanager
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from activation_recip import host_fields, ratio_summary, spread  # noqa: E402

from uol_core.acg.config import resolve_target, target_isas  # noqa: E402
from uol_core.backends.c.platforms import platform  # noqa: E402
from uol_core.graph import route  # noqa: E402
from uol_core.graph.export_import import import_model  # noqa: E402
from uol_core.graph.run import compile_graph, interleaved_times  # noqa: E402
from uol_core.runtime.turns import PEER_LEAD_IN_S  # noqa: E402

# the tile each ISA's platform file used before its current one
OLD_TILES = {"avx2": [(4, 3)], "avx512": [(8, 3)]}
# (cin, cout, plane side, kernel side): MobileNetV2's and EfficientNet-B0's 1x1 expansions and
# projections, ResNet's 3x3 convolutions
LAYERS = [(24, 144, 56, 1), (80, 480, 14, 1), (112, 672, 14, 1), (672, 112, 14, 1),
          (192, 1152, 7, 1), (1152, 192, 7, 1), (320, 1280, 7, 1),
          (64, 64, 56, 3), (256, 256, 14, 3), (512, 512, 7, 3)]


@contextmanager
def direct_tile(isa: str, tile: tuple[int, int]):
    """The `isa` platform's direct-path tile is `tile`, and no other, while inside."""
    tiles = platform(isa).tiles
    saved = {k: tiles.pop(k) for k in ("conv_direct", "conv_direct_others") if k in tiles}
    tiles["conv_direct"] = tuple(tile)
    route._EMIT_CACHE.clear()
    route._ROUTE_CACHE.clear()
    try:
        yield
    finally:
        tiles.pop("conv_direct")
        tiles.update(saved)
        route._EMIT_CACHE.clear()
        route._ROUTE_CACHE.clear()


def tile_name(tile: tuple[int, int]) -> str:
    return f"{tile[0]}x{tile[1]}"


def _compiled(isa: str, others: list[tuple[int, int]], module: nn.Module,
              inputs: tuple[torch.Tensor, ...]):
    """The module compiled with the platform's tile ("new") and with each other tile, each
    verified on a first call."""
    graph = import_model(module, *inputs)
    env = dict(zip(graph.inputs, inputs))
    graphs = {"new": compile_graph(graph)}
    graphs["new"](env)
    for tile in others:
        with direct_tile(isa, tile):
            graphs[tile_name(tile)] = compiled = compile_graph(graph)
            compiled(env)
    return {name: (lambda g=g: g(env)) for name, g in graphs.items()}


def _ratios(times: dict, others: list[tuple[int, int]]) -> dict:
    """Each other tile's time over the platform tile's, per round (>1: the platform's is faster)."""
    return {tile_name(t): ratio_summary(times[tile_name(t)], times["new"]) for t in others}


def layer_rows(isa: str, others: list[tuple[int, int]], rounds: int) -> list[dict]:
    rows = []
    for cin, cout, side, k in LAYERS:
        module = nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2), nn.SiLU()).eval()
        x = torch.randn(1, cin, side, side)
        calls = _compiled(isa, others, module, (x,))
        calls["torch"] = lambda m=module, t=x: m(t)
        with torch.no_grad():
            interleaved_times(calls, 2)  # untimed: the run's first rounds ran 1.4x slow
            times = interleaved_times(calls, rounds)
        rows.append({"layer": f"{k}x{k} {cin}->{cout} @{side}x{side} + SiLU",
                     "median_us": {n: statistics.median(v) * 1e6 for n, v in times.items()},
                     "other_over_new": _ratios(times, others),
                     "torch_over_new": ratio_summary(times["torch"], times["new"])})
    return rows


def model_row(isa: str, others: list[tuple[int, int]], name: str, batch: int, rounds: int) -> dict:
    from uol_core.graph import hf_zoo
    from uol_core.graph.peers import prepare_peers

    module, inputs = hf_zoo.build(name, batch=batch)
    calls = _compiled(isa, others, module, inputs)
    ort = prepare_peers(module, inputs, peers=("onnxruntime",))["onnxruntime"]
    if ort.ready:
        calls["onnxruntime"] = ort.call
    with torch.no_grad():
        times = interleaved_times(calls, rounds, PEER_LEAD_IN_S)
    row = {"model": name, "batch": batch, "onnxruntime": ort.note,
           "median_ms": {n: statistics.median(v) * 1e3 for n, v in times.items()},
           "other_over_new": _ratios(times, others)}
    if ort.ready:
        row["onnxruntime_over"] = {n: ratio_summary(times["onnxruntime"], times[n])
                                   for n in times if n != "onnxruntime"}
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--models", default="mobilenet_v2,efficientnet_b0,resnet50")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--tiles", help="other tiles to compare, MRxNV comma-separated")
    parser.add_argument("--no-layers", action="store_true", help="models only")
    args = parser.parse_args()
    isa = target_isas(resolve_target("host"))[0]
    if isa not in OLD_TILES and not args.tiles:
        sys.exit(f"this host builds {isa} kernels: name the tiles to compare with --tiles")
    others = [tuple(int(v) for v in t.split("x")) for t in args.tiles.split(",")] \
        if args.tiles else OLD_TILES[isa]
    torch.manual_seed(0)
    result = {**host_fields(), "kernel_isa": isa,
              "new_tile": list(platform(isa).tiles["conv_direct"]),
              "other_tiles": [list(t) for t in others],
              "layers": [] if args.no_layers else layer_rows(isa, others, args.rounds),
              "models": [model_row(isa, others, m, args.batch, args.rounds)
                         for m in args.models.split(",") if m],
              "command": "python benchmarks/conv_tile.py " + " ".join(sys.argv[1:])}
    out = ROOT / "docs" / "benchmarks" / ("conv_tile.json" if isa == "avx2" else f"conv_tile_{isa}.json")
    out.write_text(json.dumps(result, indent=1) + "\n")
    for row in result["layers"]:
        print(f"{row['layer']:36s} other/new " + "  ".join(
            f"{n} {spread(r)}" for n, r in row["other_over_new"].items())
            + f"  torch/new {spread(row['torch_over_new'])}")
    for row in result["models"]:
        print(f"{row['model']} b{row['batch']} other/new " + "  ".join(
            f"{n} {spread(r, 3)}" for n, r in row["other_over_new"].items())
            + "  ort/" + "  ".join(f"{n} {spread(r, 3)}" for n, r in row.get("onnxruntime_over", {}).items())
            + f"  {row['median_ms']}")


if __name__ == "__main__":
    main()
