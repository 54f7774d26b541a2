"""Register tiles side by side: the cost model's pick and given configs of one fp32 matmul,
alternated call by call with torch.matmul (all write into existing buffers). Writes JSON.

    python benchmarks/gemm_tiles.py --size 1024 1024 1024 \
        --config isa=avx512,path=packed,mr=6,nr=64,kc=128,mc=1020,ku=4,pf=0,par=ir,threads=2
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_gemm import interleaved

from uol_core import compile as uol_compile
from uol_core.ops import load_op


def compare(sizes: dict, configs: list[str], seconds: float) -> dict:
    """ours/torch per config (the model's pick first), from one alternating run."""
    op = load_op("matmul")
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(sizes["M"], sizes["K"], generator=gen)
    b = torch.randn(sizes["K"], sizes["N"], generator=gen)
    fns, chosen = {}, {}
    for request in [None, *configs]:
        kernel = uol_compile(op, shapes=sizes, target="host", config=request)
        out = torch.empty(sizes["M"], sizes["N"])
        name = "model" if request is None else request
        chosen[name] = kernel.config
        fns[name] = lambda k=kernel, out=out: k(out=out, A=a, B=b)
    peer = torch.empty(sizes["M"], sizes["N"])
    fns["torch"] = lambda: torch.matmul(a, b, out=peer)
    timed = interleaved(fns, 2 * sizes["M"] * sizes["N"] * sizes["K"], seconds)
    return {name: {"config": chosen.get(name), "gflops": row["gflops"],
                   "vs_torch": timed["torch"]["ms"] / row["ms"]} for name, row in timed.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, nargs=3, default=[1024, 1024, 1024], metavar=("M", "N", "K"))
    parser.add_argument("--config", action="append", default=[], help="a config to compare (repeatable)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", default="gemm_tiles.json")
    args = parser.parse_args()
    sizes = dict(zip("MNK", args.size))
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "sizes": sizes, "load_average": os.getloadavg()[0],
              "rows": compare(sizes, args.config, args.seconds)}
    Path(args.out).write_text(json.dumps(result, indent=2))
    for name, row in result["rows"].items():
        print(f"{row['vs_torch']:.3f}x torch  {row['gflops']:.0f} GFLOP/s  {name}")


if __name__ == "__main__":
    main()
