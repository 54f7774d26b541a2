"""The direct convolution path's register tile on AVX2: the platform file's tile (6 filter rows
x 2 input vectors) against the one it replaced (4 x 3), in one run, calls alternated.

Run: `.venv/bin/python benchmarks/conv_tile.py [--rounds N] [--models a,b] [--batch 1]`.
Writes docs/benchmarks/conv_tile.json. Each layer is a compiled graph of one convolution and
its activation (weights packed once, as in a model); each model the library zoo's compiled
graph, both built from the same code with only `tiles["conv_direct"]` of the AVX2 platform
swapped (route caches cleared both ways). ONNX Runtime runs in the same rounds, so the models'
ratio to the strongest deployment runtime is measured under the same load. Turns as
`uol graph run --peers` takes them (graph/run.py `interleaved_times`): untimed calls before
each timed one (runtime/turns.py: 50 ms, 250 ms where ONNX Runtime takes turns), so a pool the
previous contender left spinning does not land on it. AVX2 hosts only:
the tile is the AVX2 platform's (an AVX-512 host builds its own platform's tile).
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

OLD_TILE = (4, 3)
# (cin, cout, plane side, kernel side): MobileNetV2's and EfficientNet-B0's 1x1 expansions and
# projections, ResNet's 3x3 convolutions
LAYERS = [(24, 144, 56, 1), (80, 480, 14, 1), (112, 672, 14, 1), (672, 112, 14, 1),
          (192, 1152, 7, 1), (1152, 192, 7, 1), (320, 1280, 7, 1),
          (64, 64, 56, 3), (256, 256, 14, 3), (512, 512, 7, 3)]


@contextmanager
def direct_tile(tile: tuple[int, int]):
    """The AVX2 platform's direct-path tile is `tile` while inside."""
    tiles = platform("avx2").tiles
    saved = tiles["conv_direct"]
    tiles["conv_direct"] = tile
    route._EMIT_CACHE.clear()
    route._ROUTE_CACHE.clear()
    try:
        yield
    finally:
        tiles["conv_direct"] = saved
        route._EMIT_CACHE.clear()
        route._ROUTE_CACHE.clear()


def _both(module: nn.Module, inputs: tuple[torch.Tensor, ...]):
    """The module compiled with the platform's tile and with the old one, each verified."""
    graph = import_model(module, *inputs)
    env = dict(zip(graph.inputs, inputs))
    new = compile_graph(graph)
    new(env)
    with direct_tile(OLD_TILE):
        old = compile_graph(graph)
        old(env)
    return env, new, old


def layer_rows(rounds: int) -> list[dict]:
    rows = []
    for cin, cout, side, k in LAYERS:
        module = nn.Sequential(nn.Conv2d(cin, cout, k, padding=k // 2), nn.SiLU()).eval()
        x = torch.randn(1, cin, side, side)
        env, new, old = _both(module, (x,))
        with torch.no_grad():
            times = interleaved_times({"old": lambda o=old, e=env: o(e), "new": lambda n=new, e=env: n(e),
                                       "torch": lambda m=module, t=x: m(t)}, rounds)
        rows.append({"layer": f"{k}x{k} {cin}->{cout} @{side}x{side} + SiLU",
                     "median_us": {n: statistics.median(v) * 1e6 for n, v in times.items()},
                     "old_over_new": ratio_summary(times["old"], times["new"]),
                     "torch_over_new": ratio_summary(times["torch"], times["new"])})
    return rows


def model_row(name: str, batch: int, rounds: int) -> dict:
    from uol_core.graph import hf_zoo
    from uol_core.graph.peers import prepare_peers

    module, inputs = hf_zoo.build(name, batch=batch)
    env, new, old = _both(module, inputs)
    calls = {"old": lambda: old(env), "new": lambda: new(env)}
    ort = prepare_peers(module, inputs, peers=("onnxruntime",))["onnxruntime"]
    if ort.ready:
        calls["onnxruntime"] = ort.call
    with torch.no_grad():
        times = interleaved_times(calls, rounds, PEER_LEAD_IN_S)
    row = {"model": name, "batch": batch, "onnxruntime": ort.note,
           "median_ms": {n: statistics.median(v) * 1e3 for n, v in times.items()},
           "old_over_new": ratio_summary(times["old"], times["new"])}
    if ort.ready:
        row["onnxruntime_over_new"] = ratio_summary(times["onnxruntime"], times["new"])
        row["onnxruntime_over_old"] = ratio_summary(times["onnxruntime"], times["old"])
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=21)
    parser.add_argument("--models", default="mobilenet_v2,efficientnet_b0,resnet50")
    parser.add_argument("--batch", type=int, default=1)
    args = parser.parse_args()
    isa = target_isas(resolve_target("host"))[0]
    if isa != "avx2":  # the tile compared is the AVX2 platform's
        sys.exit(f"this host builds {isa} kernels: the AVX2 tile is not the one that runs")
    torch.manual_seed(0)
    result = {**host_fields(), "new_tile": list(platform("avx2").tiles["conv_direct"]),
              "old_tile": list(OLD_TILE), "layers": layer_rows(args.rounds),
              "models": [model_row(m, args.batch, args.rounds) for m in args.models.split(",") if m],
              "command": "python benchmarks/conv_tile.py " + " ".join(sys.argv[1:])}
    out = ROOT / "docs" / "benchmarks" / "conv_tile.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    for row in result["layers"]:
        print(f"{row['layer']:36s} old/new {spread(row['old_over_new'])}  "
              f"torch/new {spread(row['torch_over_new'])}")
    for row in result["models"]:
        print(f"{row['model']} b{row['batch']} old/new {spread(row['old_over_new'], 3)}  "
              f"ort/new {spread(row.get('onnxruntime_over_new'), 3)}  "
              f"ort/old {spread(row.get('onnxruntime_over_old'), 3)}  {row['median_ms']}")


if __name__ == "__main__":
    main()
