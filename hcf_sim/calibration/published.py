"""The model against published nccl-tests logs of real clusters.

Each log names its source and, in a `# hcf system: KIND --nodes N [--link L] [--sharp] [--intra
nvlink3] [--gpus-per-server G]` line, the topology of its machine. The NCCL settings the run used (`NCCL_ALGO=RING`, `NCCL_NVLS_ENABLE=0`,
`NCCL_COLLNET_ENABLE=0`), where its header lines state them, restrict the tuner as they restrict
NCCL. Every size is predicted by the one model every view uses (NCCL's tuner, its pick timed
flow by flow) plus one fitted term, and compared per collective and size band.

The fitted term: when one nccl-tests thread drives G GPUs (`-g G`, the log's `nGpus`), each
iteration issues G kernel launches one after another, which NCCL's tuner latencies (made to rank
algorithms, one GPU per process) leave out. Its cost per extra GPU, `launch_us`, is fitted on
every other size below 1 MiB of one log (`FIT_LOG`); no row it was fitted on enters the errors.
Run `python -m hcf_sim.calibration.published FOLDER` for the table in docs/hcf.md.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

from hcf_sim.calibration import nvls_fit
from hcf_sim.calibration.nccl_log import read_nccl_log
from hcf_sim.calibration.net_fit import Prediction, adjusted_us, fit_achieved_net
from hcf_sim.collectives import nccl_model as nm
from hcf_sim.collectives.analytical import busbw
from hcf_sim.errors import HcfError
from hcf_sim.fabric.topology import Topology, build_topology
from hcf_sim.service import tuned
from hcf_sim.simulation.flowsim import Router
from hcf_sim.simulation.nccl_flow import fabric

MIB = 1 << 20
GOAL = {">= 1 MiB": 0.10, "< 1 MiB": 0.25}  # issue 52's goal per size band
FIT_LOG = "all_reduce_h100_ring_8.txt"  # one thread driving 8 GPUs on one NVSwitch node
# NCCL_ALGO's names (NCCL's src/graph/tuning.cc, ncclAlgoStr) -> the model's algorithms
NCCL_ALGOS = {"ring": "ring", "tree": "tree", "nvls": "nvls", "nvlstree": "nvls_tree",
              "collnetdirect": "collnet_direct", "collnetchain": "collnet_chain", "pat": None}
NOT_MODELLED = {  # why the model has no such algorithm
    "pat": "PAT (NCCL's Parallel Aggregated Trees, one GPU per node) has no traffic model here"}
_ENV = re.compile(r"\b(NCCL_ALGO|NCCL_PROTO|NCCL_NVLS_ENABLE|NCCL_COLLNET_ENABLE)=([A-Za-z0-9_,^]+)")


@dataclass
class LogSystem:
    """What a log's header says about its machine and run."""

    source: str
    spec: dict
    env: dict[str, str] = field(default_factory=dict)
    gpus_per_thread: int = 1


def read_system(path: Path) -> LogSystem:
    """The header of a published log: source, topology line, NCCL settings, GPUs per thread."""
    source, spec, env, per_thread = "", None, {}, 1
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if line.startswith("# source:"):
            source = line.split(":", 1)[1].strip()
        elif line.startswith("# hcf system:"):
            spec = _spec(path, n, line)
        if line.startswith("#") and not line.startswith("# hcf system:"):
            env.update((k, v.rstrip(",")) for k, v in _ENV.findall(line))  # prose: "=0, NCCL_ALGO unset"
            found = re.search(r"\bnGpus (\d+)", line)
            per_thread = int(found.group(1)) if found else per_thread
    if spec is None:
        raise HcfError(f"{path.name}: no '# hcf system: ...' line names the machine to model")
    return LogSystem(source, spec, env, per_thread)


def _spec(path: Path, n: int, line: str) -> dict:
    words = line.split(":", 1)[1].split()

    def option(name: str, default):
        return words[words.index(name) + 1] if name in words else default

    try:
        return {"kind": words[0], "nodes": int(option("--nodes", "")), "link": option("--link", None),
                "sharp": "--sharp" in words, "intra": option("--intra", "nvlink4"),
                "gpus_per_server": int(option("--gpus-per-server", 8))}
    except (ValueError, IndexError):
        raise HcfError(f"{path.name}:{n}: expected '# hcf system: KIND --nodes N [--link L] [--sharp] "
                       f"[--intra nvlink3] [--gpus-per-server G]', got {line!r}") from None


def allowed_algorithms(env: dict[str, str]) -> set[str] | None:
    """The model's algorithms NCCL may use under these settings (None: all it would consider)."""
    allowed = None
    if "NCCL_ALGO" in env:
        names = [x.lower() for x in env["NCCL_ALGO"].split(",") if x and not x.startswith("^")]
        unknown = [x for x in names if x not in NCCL_ALGOS]
        if unknown:
            raise HcfError(f"NCCL_ALGO={env['NCCL_ALGO']}: unknown algorithm {unknown[0]!r}")
        missing = [x for x in names if NCCL_ALGOS[x] is None]
        if missing and len(missing) == len(names):
            raise HcfError(f"NCCL_ALGO={env['NCCL_ALGO']}: {missing[0]} is not modelled: {NOT_MODELLED[missing[0]]}")
        allowed = {NCCL_ALGOS[x] for x in names if NCCL_ALGOS[x]}
    everything = {"ring", "tree", "nvls", "nvls_tree", "collnet_direct", "collnet_chain"}
    allowed = set(everything if allowed is None else allowed)
    if env.get("NCCL_NVLS_ENABLE") == "0":
        allowed -= {"nvls", "nvls_tree"}
    if env.get("NCCL_COLLNET_ENABLE") == "0":
        allowed -= {"collnet_direct", "collnet_chain"}
    return None if allowed == everything else allowed


def allowed_protocols(env: dict[str, str]) -> set[str] | None:
    """NCCL's protocols these settings leave (NCCL_PROTO: a list, or '^' and the ones to drop);
    None: all of them."""
    if "NCCL_PROTO" not in env:
        return None
    value = env["NCCL_PROTO"]
    names = {x.lower() for x in value.lstrip("^").split(",") if x}
    known = {p.lower(): p for p in nm.PROTOCOLS}
    unknown = sorted(names - set(known))
    if unknown:
        raise HcfError(f"NCCL_PROTO={value}: unknown protocol {unknown[0]!r} (NCCL's: {', '.join(nm.PROTOCOLS)})")
    left = set(nm.PROTOCOLS) - {known[x] for x in names} if value.startswith("^") else {known[x] for x in names}
    return None if left == set(nm.PROTOCOLS) else left


def predict(topo: Topology, router: Router, coll: str, size: int, allowed: set[str] | None,
            protocols: set[str] | None = None) -> Prediction:
    """The model's answer for one size: NCCL's tuner among the allowed algorithms and protocols,
    timed flow by flow."""
    algorithm = protocol = None
    if allowed is not None or protocols is not None:
        choice = nm.select(fabric(topo).cluster, coll, size)
        pick = next((c for c in choice.candidates if (allowed is None or c.algorithm in allowed)
                     and (protocols is None or c.protocol in protocols)), None)
        if pick is None:
            raise HcfError(f"none of {', '.join(sorted(allowed or ['any algorithm']))} with "
                           f"{', '.join(sorted(protocols or ['any protocol']))} can run {coll} on {topo.name}")
        algorithm = pick.algorithm if allowed is not None else None
        protocol = pick.protocol if protocols is not None else None
    res = tuned(topo, coll, size, algorithm, "flow", "spread", router=router, protocol=protocol)
    return Prediction(coll, size, res.time * 1e6, res.terms["latency"] * 1e6, res.algorithm, res.protocol)


def _measured(path: Path) -> dict[tuple[str, int], float]:
    """(collective, size) -> the log's median time (us) over its runs of that size (>= 1 KiB:
    below it the log's busbw is rounded to 0.00)."""
    times: dict[tuple[str, int], list[float]] = {}
    for run in read_nccl_log(path):
        coll = nm.canonical_collective(run.collective or "all_reduce")
        for r in run.rows:
            if r.size >= 1024 and r.busbw > 0:
                times.setdefault((coll, r.size), []).append(r.time_us)
    return {k: statistics.median(v) for k, v in times.items()}


def check(path: Path, launch_us: float = 0.0, fitted_sizes: frozenset[int] = frozenset(),
          nvls_step_us: float | None = None) -> dict:
    """Per size: measured and predicted busbw and the error; per band the median |error| over the
    sizes not fitted on (`fitted_sizes`, which only the launch fit log has; a multi-node log also
    leaves out the half of its sizes its network is fitted on, see net_fit; nvls_fit.FIT_LOG the
    half its NVLS loop step is fitted on). `nvls_step_us` replaces the stored per-step figure."""
    system = read_system(path)
    spec = system.spec
    topo = build_topology(spec["kind"], spec["nodes"], spec["link"], sharp=spec["sharp"], intra=spec["intra"],
                          gpus_per_server=spec["gpus_per_server"])
    router, allowed, p = Router(topo), allowed_algorithms(system.env), len(topo.gpus)
    protocols = allowed_protocols(system.env)
    launch = launch_us * (system.gpus_per_thread - 1)
    measured = sorted(_measured(path).items())
    preds = [predict(topo, router, coll, size, allowed, protocols) for (coll, size), _ in measured]
    cluster, net, nvls = fabric(topo).cluster, None, None
    if path.name == nvls_fit.FIT_LOG:
        nvls = nvls_fit.fit_nvls_step(cluster, preds, [t for _, t in measured], launch)
        nvls_step_us, fitted_sizes = nvls.step_us, fitted_sizes | nvls.fitted_sizes
    if nvls_step_us is not None:
        preds = [dataclasses.replace(p, time_us=nvls_fit.adjusted_us(cluster, p, nvls_step_us)) for p in preds]
    if cluster.nodes > 1:
        net = fit_achieved_net(cluster, preds, [t for _, t in measured], launch)
        fitted_sizes = fitted_sizes | net.fitted_sizes
    rows = []
    for ((coll, size), t), pred in zip(measured, preds, strict=True):
        model_us = adjusted_us(cluster, pred, net) if net else pred.time_us
        ours = busbw(coll, p, size, (model_us + launch) * 1e-6) / 1e9
        theirs = busbw(coll, p, size, t * 1e-6) / 1e9
        rows.append({"collective": coll, "size": size, "measured_busbw": theirs, "predicted_busbw": ours,
                     "measured_us": t, "model_us": model_us, "preset_us": pred.time_us,
                     "pick": f"{pred.algorithm}/{pred.protocol}", "error": ours / theirs - 1,
                     "fitted": size in fitted_sizes})
    held = [r for r in rows if not r["fitted"]]
    big = [abs(x["error"]) for x in held if x["size"] >= MIB]
    small = [abs(x["error"]) for x in held if x["size"] < MIB]
    return {"file": path.name, "source": system.source, "system": spec, "env": system.env,
            "gpus_per_thread": system.gpus_per_thread, "rows": rows, "net": net, "nvls": nvls,
            "median_error_ge_1mib": statistics.median(big) if big else None,
            "median_error_lt_1mib": statistics.median(small) if small else None}


def fit_launch(path: Path) -> tuple[float, frozenset[int]]:
    """`launch_us` from every other size below 1 MiB of the log at `path`: the median of what its
    time holds beyond the model's, per extra GPU its thread drives; and the sizes fitted on."""
    system = read_system(path)
    if system.gpus_per_thread < 2:
        raise HcfError(f"{path.name}: one GPU per thread ('nGpus 1'): nothing to fit the launch cost on")
    plain = check(path)
    sizes = sorted(r["size"] for r in plain["rows"] if r["size"] < MIB)[::2]
    extra = [r["measured_us"] - r["model_us"] for r in plain["rows"] if r["size"] in sizes]
    return max(0.0, statistics.median(extra)) / (system.gpus_per_thread - 1), frozenset(sizes)


def table(folder: Path) -> tuple[float, list[dict]]:
    """The launch cost fitted on FIT_LOG, the NVLS loop step fitted on nvls_fit.FIT_LOG (with that
    launch cost), and every log of `folder` checked with both."""
    launch, fitted = fit_launch(folder / FIT_LOG)
    step = check(folder / nvls_fit.FIT_LOG, launch)["nvls"].step_us
    checks = []
    for path in sorted(folder.glob("*.txt")):
        try:
            checks.append(check(path, launch, fitted if path.name == FIT_LOG else frozenset(), step))
        except HcfError as exc:  # a run the model cannot describe stays in the table, saying why
            checks.append({"file": path.name, "not_modelled": str(exc), "rows": []})
    return launch, checks


def _band_cell(rows: list[dict], big: bool, goal: float) -> str:
    errs = [abs(r["error"]) for r in rows if not r["fitted"] and (r["size"] >= MIB) == big]
    if not errs:
        return "-"
    med = statistics.median(errs)
    return f"{med:.0%} ({len(errs)}, max {max(errs):.0%}) {'met' if med <= goal else 'missed'}"


def markdown(folder: Path) -> list[str]:
    """The table's lines: one row per log and collective."""
    launch, checks = table(folder)
    step = next(c["nvls"].step_us for c in checks if c.get("nvls"))
    out = [f"launch cost per extra GPU a thread drives: {launch:.2f} us, fitted on every other size "
           f"< 1 MiB of {FIT_LOG} (those sizes are left out of its row); NVLS loop step: {step:.2f} us, "
           f"fitted on every other size of {nvls_fit.FIT_LOG} (the constants file holds "
           f"{nvls_fit.stored_step_us():.2f} us)", "",
           "| log | system (NCCL settings) | collective | median abs busbw error >= 1 MiB (sizes, max) | "
           "< 1 MiB | largest size: measured / ours GB/s (pick) |", "|---|---|---|---|---|---|"]
    for c in checks:
        if "not_modelled" in c:
            out.append(f"| {c['file']} | not modelled: {c['not_modelled']} | | | | |")
            continue
        s = c["system"]
        env = ", ".join(f"{k}={v}" for k, v in sorted(c["env"].items()))
        server = "" if s["intra"] == "nvlink4" and s["gpus_per_server"] == 8 else \
            f", {s['gpus_per_server']} GPUs per server on {s['intra']}"
        name = (f"{s['kind']} {s['nodes']} GPUs, {s['link'] or 'default links'}{', SHARP' if s['sharp'] else ''}"
                f"{server}{f' ({env})' if env else ''}{'; ' + c['net'].describe() if c['net'] else ''}"
                f"{'; ' + c['nvls'].describe() if c['nvls'] else ''}")
        for coll in sorted({r["collective"] for r in c["rows"]}):
            rows = [r for r in c["rows"] if r["collective"] == coll]
            last = rows[-1]
            out.append(f"| {c['file']}{' (fit log)' if c['file'] == FIT_LOG else ''} | {name} | {coll} | "
                       f"{_band_cell(rows, True, GOAL['>= 1 MiB'])} | {_band_cell(rows, False, GOAL['< 1 MiB'])} | "
                       f"{last['measured_busbw']:.1f} / {last['predicted_busbw']:.1f} ({last['pick']}) |")
    return out


if __name__ == "__main__":
    try:
        print("\n".join(markdown(Path(sys.argv[1] if len(sys.argv) > 1 else "tests/hcf/fixtures/published"))))
    except HcfError as exc:
        sys.exit(f"error: {exc}")
