"""The model against published nccl-tests logs of real clusters, nothing fitted on them.

Each log in a folder names its source and, in a `# hcf system: <topology> --nodes N [--link L]
[--sharp]` line, the topology that describes its machine. Every row is predicted by the one
model every view uses (`simulate --algorithm auto`, NCCL's tuner timed flow by flow) and the
bus bandwidths are compared. Run `python -m hcf_sim.calibration.published FOLDER` for the table.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

from hcf_sim.calibration.nccl_log import read_nccl_log
from hcf_sim.errors import HcfError
from hcf_sim.fabric.topology import build_topology
from hcf_sim.service import simulate

MIB = 1 << 20


def _system(path: Path) -> tuple[str, dict, str]:
    source, spec = "", None
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("# source:"):
            source = line.split(":", 1)[1].strip()
        if line.startswith("# hcf system:"):
            words = line.split(":", 1)[1].split()
            try:
                opts = {"kind": words[0], "nodes": int(words[words.index("--nodes") + 1]),
                        "link": words[words.index("--link") + 1] if "--link" in words else None,
                        "sharp": "--sharp" in words}
            except (ValueError, IndexError):
                raise HcfError(f"{path.name}:{n}: expected '# hcf system: KIND --nodes N "
                               f"[--link L] [--sharp]', got {line!r}") from None
            spec = opts
    if spec is None:
        raise HcfError(f"{path.name}: no '# hcf system: ...' line names the machine to model")
    return source, spec, path.name


def check(path: Path) -> dict:
    """Per row: measured and predicted busbw; medians of |error| at >= 1 MiB and below."""
    source, spec, name = _system(path)
    topo = build_topology(spec["kind"], spec["nodes"], spec["link"], sharp=spec["sharp"])
    rows = []
    for run in read_nccl_log(path):
        coll = (run.collective or "all_reduce").replace("_", "")
        for r in run.rows:
            if r.size < 1024 or r.busbw <= 0:
                continue  # below 1 KiB the log's busbw is rounded to 0.00
            res = simulate(topo, coll, r.size, "auto", "flow", routing="spread")
            rows.append({"collective": coll, "size": r.size, "measured_busbw": r.busbw,
                         "predicted_busbw": res.busbw / 1e9, "pick": f"{res.algorithm}/{res.protocol}",
                         "error": res.busbw / 1e9 / r.busbw - 1})
    big = [abs(x["error"]) for x in rows if x["size"] >= MIB]
    small = [abs(x["error"]) for x in rows if x["size"] < MIB]
    return {"file": name, "source": source, "system": spec, "rows": rows,
            "median_error_ge_1mib": statistics.median(big) if big else None,
            "median_error_lt_1mib": statistics.median(small) if small else None}


def main(folder: str) -> None:
    """Print one markdown row per log (the table in docs/hcf.md)."""
    print("| log | system | median abs busbw error >= 1 MiB | < 1 MiB | largest size: measured / ours (pick) |")
    print("|---|---|---|---|---|")
    for path in sorted(Path(folder).glob("*.txt")):
        c = check(path)
        last = c["rows"][-1]
        sysd = f"{c['system']['kind']} {c['system']['nodes']} GPUs, {c['system']['link'] or 'default links'}"
        print(f"| {c['file']} | {sysd} | {c['median_error_ge_1mib']:.0%} | {c['median_error_lt_1mib']:.0%} | "
              f"{last['measured_busbw']:.1f} / {last['predicted_busbw']:.1f} GB/s ({last['pick']}) |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tests/hcf/fixtures/published")
