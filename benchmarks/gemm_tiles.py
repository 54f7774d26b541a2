"""Register tiles side by side: the cost model's pick and given configs of one fp32 matmul,
alternated call by call with torch.matmul (all write into existing buffers). Writes JSON.

    python benchmarks/gemm_tiles.py --size 1024 1024 1024 \
        --config isa=avx512,path=packed,mr=6,nr=64,kc=128,mc=1020,ku=4,pf=0,par=ir,threads=2

`--numpy CORETYPE` adds numpy's OpenBLAS (its own process, alternated round by round with the
first --config): `native` for the kernel OpenBLAS picks, `Haswell` for its AVX2 kernel, the
peer of an isa=avx2 config on an AVX-512 host.
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
from cpu_gemm import interleaved, numpy_matmul
from docs_section import write_report

from uol_core import compile as uol_compile
from uol_core.ops import load_op


def compare(sizes: dict, configs: list[str], seconds: float, numpy: str | None = None) -> dict:
    """ours/torch per config (the model's pick first), from one alternating run; with `numpy`
    (an OpenBLAS core type, or 'native') numpy's row too, against the first given config."""
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
    rows = {name: {"config": chosen.get(name), "gflops": row["gflops"],
                   "vs_torch": timed["torch"]["ms"] / row["ms"]} for name, row in timed.items()}
    if numpy:
        first = configs[0] if configs else "model"
        peer = numpy_matmul(sizes["M"], sizes["N"], sizes["K"], chosen[first].get("threads", 2),
                            fns[first], coretype=None if numpy == "native" else numpy)
        rows[f"numpy ({peer['kernel']})"] = {
            "config": None, "gflops": peer["gflops"],
            "vs_torch": timed["torch"]["ms"] / peer["ms"],
            "ours_over_numpy": peer["ours_same_time_gflops"] / peer["gflops"]}
    return rows


PACKED = "isa=avx512,path=packed,ku=4,pf=0,par=ir,threads=2"
# The cases of the "Register tiles" section (--doc): each size with the configs the model's
# choice is made against on AVX-512 (B's micro-panel resident in L1 at kc=128-192, or
# streamed from L2 at kc=512), the model's own pick first in every row.
DOC_CASES = [
    ((2048, 2048, 2048), [f"{PACKED},mr=8,nr=48,kc=192,mc=384", f"{PACKED},mr=6,nr=64,kc=128,mc=384"]),
    ((4096, 1024, 4096), [f"{PACKED},mr=6,nr=64,kc=128,mc=384"]),
    ((1024, 1024, 1024), [f"{PACKED},mr=6,nr=64,kc=512,mc=384", f"{PACKED},mr=6,nr=64,kc=128,mc=384"]),
    ((512, 512, 512), [f"{PACKED},mr=6,nr=64,kc=512,mc=384"]),
    ((1000, 777, 513), [f"{PACKED},mr=9,nr=48,kc=512,mc=288"]),
]


def _short(config: dict | str) -> str:
    """A config as its tile, depth and block: 6x64 kc=512 mc=384."""
    c = config if isinstance(config, dict) else dict(kv.split("=") for kv in config.split(","))
    return f"{c['mr']}x{c['nr']} kc={c['kc']} mc={c['mc']}"


def write_doc(seconds: float) -> None:
    """Run DOC_CASES and write docs/benchmarks/gemm_tiles.json and the "Register tiles"
    section of docs/benchmarks.md."""
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "load_average_start": os.getloadavg()[0],
              "cases": []}
    lines = [f"Command: `python benchmarks/gemm_tiles.py --doc --seconds {seconds:g}` "
             f"({report['date']}, 2 threads, load average {report['load_average_start']:.1f} "
             "at the start). Each row alternates the model's pick, the configs beside it and "
             "torch.matmul call by call, all writing into existing buffers; x torch is "
             "torch's time over ours.", "",
             "| size | model's pick | x torch | alternatives (x torch) |", "|---|---|---|---|"]
    for size, configs in DOC_CASES:
        sizes = dict(zip("MNK", size))
        rows = compare(sizes, configs, seconds)
        report["cases"].append({"sizes": sizes, "rows": rows})
        model = rows["model"]
        others = "; ".join(f"{_short(name)} {row['vs_torch']:.2f}" for name, row in rows.items()
                           if name not in ("model", "torch"))
        lines.append(f"| {'x'.join(map(str, size))} | {_short(model['config'])} | "
                     f"{model['vs_torch']:.2f} | {others} |")
        print(lines[-1])
    write_report("Register tiles", report, lines, slug="gemm_tiles")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, nargs=3, default=[1024, 1024, 1024], metavar=("M", "N", "K"))
    parser.add_argument("--config", action="append", default=[], help="a config to compare (repeatable)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--out", default="gemm_tiles.json")
    parser.add_argument("--numpy", metavar="CORETYPE",
                        help="add numpy's OpenBLAS: 'native' or a core type (Haswell: AVX2)")
    parser.add_argument("--doc", action="store_true",
                        help="run the documented cases and write the 'Register tiles' section")
    args = parser.parse_args()
    if args.doc:
        write_doc(args.seconds)
        return
    sizes = dict(zip("MNK", args.size))
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "sizes": sizes, "load_average": os.getloadavg()[0],
              "rows": compare(sizes, args.config, args.seconds, args.numpy)}
    Path(args.out).write_text(json.dumps(result, indent=2))
    for name, row in result["rows"].items():
        mine = f"  (first config / numpy, same rounds: {row['ours_over_numpy']:.3f})" \
            if "ours_over_numpy" in row else ""
        print(f"{row['vs_torch']:.3f}x torch  {row['gflops']:.0f} GFLOP/s  {name}{mine}")


if __name__ == "__main__":
    main()
