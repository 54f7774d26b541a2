"""`uol hcf`: simulate collectives on cluster topologies, sweep, faults, pipelines, calibrate and validate (gloo or your nccl-tests logs), NCCL-style prediction, train with compression.

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress
from rich.table import Table

from hcf_sim.errors import HcfError, human_bytes, parse_size, parse_sizes

app = typer.Typer(help="Collective communication: topologies, algorithms, compression, overlap, faults, gloo runtime.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
console = Console()

TOPO_HELP = "fat-tree | torus2d | torus3d | dragonfly | rail | ring | full | custom"


def _friendly(fn: Callable[..., Any]) -> Callable[..., Any]:
    # every command: HcfError becomes one clear line and exit status 2, never a traceback
    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except HcfError as exc:
            # soft wrap: the error stays one line however narrow the terminal (scripts grep it)
            Console(stderr=True, soft_wrap=True).print(f"[red]error:[/red] {escape(str(exc))}", highlight=False)
            raise typer.Exit(2) from None
    return run


def _emit(data: Any, as_json: bool, table: Table | None = None) -> None:
    if as_json:
        typer.echo(json.dumps(data, indent=2, default=str))
    elif table is not None:
        console.print(table)


def _topo(topology: str, nodes: int, link: str | None, oversubscription: float, topology_file: str | None,
          sharp: bool = False, intra: str = "nvlink4", gpus_per_server: int = 8):
    from hcf_sim.fabric.topology import build_topology
    return build_topology(topology, nodes, link, oversubscription, gpus_per_server, topology_file, sharp, intra)


INTRA_HELP = "link inside a rail server: nvlink4 (H100) | nvlink3 (A100)"
GPS_HELP = "GPUs per rail server"


SHARP_HELP = "the InfiniBand switches reduce (SHARP, NCCL CollNet): rail and fat-tree"


def _us(t: float) -> str:
    return f"{t * 1e6:,.2f}"


@app.command()
@_friendly
def topology(topology: str = typer.Option("fat-tree", help=TOPO_HELP), nodes: int = typer.Option(16, help="number of GPUs"),
             link: str = typer.Option(None, help="link preset: nvlink4 | nvlink3 | ib_ndr | roce_200g | tcp_100g | pcie_gen5"),
             oversubscription: float = typer.Option(1.0, help="uplink oversubscription (fat-tree, rail)"),
             topology_file: str = typer.Option(None, help="custom topology JSON"),
             links: bool = typer.Option(False, "--links", help="list the links"),
             export: str = typer.Option(None, help="write the topology as custom JSON to this path"),
             as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Build a topology and show its GPUs, NICs, switches and links (and the link presets with sources)."""
    from hcf_sim.fabric.links import PRESETS
    t = _topo(topology, nodes, link, oversubscription, topology_file)
    if export:
        with open(export, "w") as f:
            json.dump(t.to_json(), f, indent=1)
    data = {"topology": t.summary(), "presets": {k: {"bandwidth_GBps": p.bandwidth / 1e9, "sources": p.sources}
                                                 for k, p in PRESETS.items()}}
    if links:
        data["links"] = [{"link": f"{u}-{v}", "GBps": d["bandwidth"] / 1e9, "latency_ns": d["latency"] * 1e9,
                          "protocol": d["preset"]} for u, v, d in t.graph.edges(data=True)]
    tab = Table(title=f"{t.name}")
    for k in t.summary():
        tab.add_column(k)
    tab.add_row(*map(str, t.summary().values()))
    _emit(data, as_json, tab)
    if links and not as_json:
        lt = Table("link", "GB/s", "latency ns", "protocol")
        for row in data["links"]:
            lt.add_row(row["link"], f"{row['GBps']:.1f}", f"{row['latency_ns']:.0f}", row["protocol"])
        console.print(lt)


@app.command()
@_friendly
def simulate(topology: str = typer.Option("fat-tree", help=TOPO_HELP), nodes: int = typer.Option(16, help="number of GPUs (ranks)"),
             collective: str = typer.Option("allreduce", help="allreduce | allgather | reducescatter | alltoall | broadcast"),
             algorithm: str = typer.Option("auto", help="ring | tree | recursive_doubling | rabenseifner | hierarchical | ... | auto"),
             size: str = typer.Option("64MiB", help="message size, e.g. 4096, 64KiB, 1GiB"),
             method: str = typer.Option("flow", help="flow (routes + congestion) | analytical (alpha-beta)"),
             protocol: str = typer.Option("Simple", help="LL | LL128 | Simple"),
             routing: str = typer.Option("ecmp", help="ecmp (hashed) | shortest | spread (split over equal-cost paths, as the IDE)"),
             link: str = typer.Option(None, help="link preset for the fabric"),
             oversubscription: float = typer.Option(1.0, help="uplink oversubscription"),
             topology_file: str = typer.Option(None, help="custom topology JSON (with --topology custom)"),
             fail: str = typer.Option(None, help="fault: link:U,V | switch:NAME | node:GPU"),
             sharp: bool = typer.Option(False, "--sharp", help=SHARP_HELP),
             intra: str = typer.Option("nvlink4", help=INTRA_HELP),
             gpus_per_server: int = typer.Option(8, help=GPS_HELP),
             profile: bool = typer.Option(False, "--profile", help="print the wall time of each phase"),
             as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Simulate one collective: time, algbw, busbw (nccl-tests definitions), cost terms and the busiest links."""
    from hcf_sim.simulation.timing import phase, record
    with record() as spent:
        with phase("topology"):
            t = _topo(topology, nodes, link, oversubscription, topology_file, sharp, intra, gpus_per_server)
        _simulate(t, collective, algorithm, size, method, protocol, routing, fail, as_json, spent if profile else None)


def _simulate(t, collective: str, algorithm: str, size: str, method: str, protocol: str, routing: str,
              fail: str | None, as_json: bool, spent: list | None) -> None:
    import time

    from hcf_sim.collectives.analytical import canonical_collective
    from hcf_sim.faults import fault_scenario
    from hcf_sim.service import simulate as run
    collective = canonical_collective(collective)
    nbytes = parse_size(size)
    if fail:
        kind, _, target = fail.partition(":")
        rep = fault_scenario(t, kind, target, collective, nbytes, algorithm, method)
        tab = Table("", "time us", "algorithm", "busbw GB/s", title=f"fault {rep.fault}: slowdown {rep.slowdown:.2f}x")
        for name, r in (("before", rep.before), ("after", rep.after)):
            tab.add_row(name, _us(r.time), r.algorithm, f"{r.busbw / 1e9:.2f}")
        _emit(rep.to_dict(), as_json, tab)
        if not as_json:
            console.print(f"{rep.replanned}; {rep.rerouted_pairs} of {rep.pairs_checked} rank pairs rerouted")
        return
    t0 = time.perf_counter()
    r = run(t, collective, nbytes, algorithm, method, protocol, routing)
    if spent is not None:
        spent.append(("simulate (all of it)", time.perf_counter() - t0))
        _print_profile(spent, as_json)
    tab = Table("collective", "algorithm", "protocol", "method", "ranks", "size", "time us", "algbw GB/s",
                "busbw GB/s", title=t.name)
    tab.add_row(r.collective, r.algorithm, r.protocol, r.method, str(r.ranks), human_bytes(r.size), _us(r.time),
                f"{r.algbw / 1e9:.3f}", f"{r.busbw / 1e9:.3f}")
    _emit(r.to_dict(), as_json, tab)
    if not as_json:
        console.print(f"model: {r.model}")
        console.print(f"terms: latency {_us(r.terms['latency'])} us ({r.terms['steps']} steps), bandwidth "
                      f"{_us(r.terms['bandwidth'])} us, reduction {_us(r.terms['reduction'])} us")
        if r.selection:
            console.print(f"why: {r.selection}")
        for n in r.notes:
            console.print(f"note: {n}")
        if r.link_load:
            lt = Table("busiest links", "bytes", "utilisation", title="per-link load")
            for x in r.link_load[:5]:
                lt.add_row(x["link"], f"{x['bytes']:.3g}", f"{x['utilisation']:.0%}")
            console.print(lt)


def _print_profile(spent: list[tuple[str, float]], as_json: bool) -> None:
    # phases nest (a flow run inside 'simulate'), so the total row is measured, not summed
    tab = Table("phase", "ms", title="time per phase")
    for name, secs in spent:
        tab.add_row(name, f"{secs * 1e3:,.1f}")
    Console(stderr=True).print(tab) if as_json else console.print(tab)


@app.command()
@_friendly
def sweep(topology: str = typer.Option("fat-tree", help=TOPO_HELP), nodes: int = typer.Option(16, help="number of GPUs"),
          collective: str = typer.Option("allreduce", help="collective"),
          algorithms: str = typer.Option("all", help="comma-separated algorithms, or all"),
          sizes: str = typer.Option("1KiB:1GiB", help="LOW:HIGH (powers of two) or a comma list"),
          method: str = typer.Option("analytical", help="analytical | flow"),
          protocol: str = typer.Option("Simple", help="LL | LL128 | Simple"),
          link: str = typer.Option(None, help="link preset"),
          oversubscription: float = typer.Option(1.0, help="uplink oversubscription"),
          topology_file: str = typer.Option(None, help="custom topology JSON"),
          sharp: bool = typer.Option(False, "--sharp", help=SHARP_HELP),
          intra: str = typer.Option("nvlink4", help=INTRA_HELP),
          gpus_per_server: int = typer.Option(8, help=GPS_HELP),
          as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Time every algorithm at every size; show NCCL's pick per size (as `simulate`) and the crossovers."""
    from hcf_sim.collectives.analytical import canonical_collective
    from hcf_sim.collectives.selector import candidates, crossovers
    from hcf_sim.service import sweep as run
    from hcf_sim.service import topology_params
    collective = canonical_collective(collective)
    t = _topo(topology, nodes, link, oversubscription, topology_file, sharp, intra, gpus_per_server)
    sz = parse_sizes(sizes)
    intra, inter, group = topology_params(t, protocol)
    algos = candidates(collective, len(t.gpus), group) if algorithms == "all" else algorithms.split(",")
    with Progress(console=Console(stderr=True), disable=as_json, transient=True) as prog:
        task = prog.add_task("simulating", total=len(sz) * len(algos))
        res = run(t, collective, sz, algos, method, protocol, progress=lambda n: prog.advance(task, n))
    xs = crossovers(collective, len(t.gpus), intra, inter, group)
    rows: dict[int, dict] = {}
    for r in res:
        rows.setdefault(int(r.size), {})[r.algorithm] = r.time
    # the answer per size is the one `simulate --algorithm auto` gives: NCCL's tuner, same model
    picks = {s: run(t, collective, [s], ["auto"], method, protocol)[0] for s in rows}
    tab = Table("size", *[f"{a} us" for a in algos], "auto (NCCL tuner) us", "auto picks",
                title=f"{collective} on {t.name} ({method})")
    for s, d in rows.items():
        tab.add_row(human_bytes(s), *[_us(d[a]) for a in algos], _us(picks[s].time),
                    f"{picks[s].algorithm}/{picks[s].protocol}")
    data = {"topology": t.summary(), "results": [r.to_dict() for r in res],
            "best": [{"size": s, "algorithm": r.algorithm, "protocol": r.protocol, "time": r.time,
                      "model": r.model} for s, r in picks.items()],
            "crossovers": [{"size": x.size, "from": x.frm, "to": x.to} for x in xs]}
    _emit(data, as_json, tab)
    if not as_json:
        for x in xs:
            console.print(f"crossover (textbook schedules): above {human_bytes(x.size)} {x.to} beats {x.frm}")
        if picks:
            console.print(f"auto: {next(iter(picks.values())).model}")


@app.command()
@_friendly
def pipeline(stages: int = typer.Option(4, help="pipeline stages (ranks per pipeline)"),
             microbatches: int = typer.Option(8, help="micro-batches per step"),
             schedule: str = typer.Option("1f1b", help="gpipe | 1f1b | interleaved"),
             chunks: int = typer.Option(2, help="model chunks per rank (interleaved)"),
             fwd_ms: float = typer.Option(1.0, help="forward time per stage per micro-batch (ms)"),
             p2p_us: float = typer.Option(10.0, help="activation send time between stages (us)"),
             dp: int = typer.Option(1, help="data-parallel pipelines (replicas)"),
             grad_mb: float = typer.Option(100.0, help="gradient MB per stage, all-reduced across replicas"),
             dp_link: str = typer.Option("ib_ndr", help="link preset for the DP all-reduce"),
             dp_topology: str = typer.Option("fat-tree", help="fabric of the DP replicas (one GPU each): " + TOPO_HELP),
             slow: str = typer.Option(None, help="straggler factors per stage, e.g. 1,1,1.5,1"),
             rebalance_layers: int = typer.Option(0, "--rebalance", help="re-assign this many layers from measured stage times"),
             as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Simulate a pipeline step: per-rank compute/comm/bubbles, exposed DP communication, cluster utilisation."""
    from hcf_sim.pipelines.simulator import rebalance, simulate_pipeline
    from hcf_sim.service import simulate as sim
    factors = [float(x) for x in slow.split(",")] if slow else None
    ar, dp_run = 0.0, None
    if dp > 1:
        # the DP all-reduce is the answer `simulate --algorithm auto` gives for the same question
        dp_run = sim(_topo(dp_topology, dp, dp_link, 1.0, None), "allreduce", grad_mb * 1e6, "auto", "flow")
        ar = dp_run.time
    r = simulate_pipeline(stages, microbatches, schedule, fwd_ms * 1e-3, 2.0, p2p_us * 1e-6, chunks, ar, factors)
    data = {k: v for k, v in r.__dict__.items() if k != "events"}
    if dp_run:
        data["dp_allreduce"] = {"algorithm": dp_run.algorithm, "protocol": dp_run.protocol, "time": dp_run.time,
                                "busbw": dp_run.busbw, "model": dp_run.model, "topology": dp_topology}
    data["events"] = [e.__dict__ for e in r.events]
    tab = Table("rank", "compute ms", "bubble ms", "exposed comm ms",
                title=f"{schedule}: {stages} stages x {microbatches} micro-batches x {dp} replicas, "
                      f"makespan {r.makespan * 1e3:.2f} ms, utilisation {r.utilisation:.1%} "
                      f"(ideal no-comm {1 - r.ideal_bubble_fraction:.1%})")
    for d in range(stages):
        tab.add_row(str(d), f"{r.compute[d] * 1e3:.2f}", f"{r.bubble[d] * 1e3:.2f}", f"{r.exposed_comm[d] * 1e3:.2f}")
    if rebalance_layers and factors:
        per = [rebalance_layers // stages + (i < rebalance_layers % stages) for i in range(stages)]
        measured = [n * fwd_ms * f for n, f in zip(per, factors, strict=True)]
        data["rebalance"] = rebalance(per, measured)
    _emit(data, as_json, tab)
    if not as_json and dp_run:
        console.print(f"DP all-reduce of {grad_mb:g} MB on {dp} GPUs ({dp_topology}): {dp_run.algorithm}/"
                      f"{dp_run.protocol} {_us(dp_run.time)} us; model: {dp_run.model}")
    if not as_json and "rebalance" in data:
        rb = data["rebalance"]
        console.print(f"rebalance: layers {rb['layers_before']} -> {rb['layers_after']}, "
                      f"bottleneck stage {rb['speedup']:.2f}x faster")


FROM_HELP = "nccl-tests output file(s) of your cluster (repeat --from for several)"


@app.command()
@_friendly
def calibrate(ranks: int = typer.Option(None, help="rank count, when the logs do not list their ranks"),
              from_: list[str] = typer.Option(None, "--from", help=FROM_HELP),
              collective: str = typer.Option(None, help="collective to fit (default: the first in the logs)"),
              save: str = typer.Option(None, help="write the fitted cluster as a topology JSON the IDE loads"),
              as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Fit the model to your nccl-tests logs (--from), or measure alpha/beta by gloo ping-pong on 127.0.0.1."""
    if from_:
        from uol_cli.hcf_logs_cmd import calibrate_logs
        calibrate_logs(from_, collective, ranks, save, as_json)
        return
    from hcf_sim.calibration.alpha_beta import calibrate as run
    with console.status("ping-pong over gloo...", spinner="dots"):
        c = run()
    tab = Table("alpha us", "beta ns/B (GB/s)", "gamma ns/B", "fit error", title="gloo calibration")
    tab.add_row(f"{c.alpha * 1e6:.1f}", f"{c.beta * 1e9:.3f} ({1 / c.beta / 1e9:.2f})", f"{c.gamma * 1e9:.3f}",
                f"{c.fit_error:.1%}")
    _emit(c.to_dict(), as_json, tab)


@app.command()
@_friendly
def validate(ranks: str = typer.Option("2,4", help="process counts to test (gloo), or the rank count of --from logs"),
             sizes: str = typer.Option("4KiB:16MiB", help="message sizes"),
             iters: int = typer.Option(10, help="timed iterations per size"),
             from_: list[str] = typer.Option(None, "--from", help=FROM_HELP),
             collective: str = typer.Option(None, help="collective to fit on (with --from)"),
             as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Held-out errors: fit on half the sizes of your nccl-tests logs (--from), or gloo all-reduce on local processes."""
    if from_:
        from uol_cli.hcf_logs_cmd import validate_logs
        validate_logs(from_, collective, int(ranks) if ranks.isdigit() else None, as_json)
        return
    from hcf_sim.calibration.alpha_beta import validate as run
    with console.status("running gloo all-reduce sweeps...", spinner="dots"):
        v = run([int(x) for x in ranks.split(",")], parse_sizes(sizes), iters)
    tab = Table("ranks", "size", "measured us", "predicted us", "interval us", "error", title="all-reduce: model vs gloo")
    for row in v["rows"]:
        low, high = row["interval"]
        tab.add_row(str(row["ranks"]), human_bytes(row["size"]), _us(row["measured"]), _us(row["predicted"]),
                    f"{_us(low)}-{_us(high)} ({'inside' if row['inside_interval'] else 'outside'})",
                    f"{row['error']:.1%}")
    _emit(v, as_json, tab)
    if not as_json:
        console.print(f"median error >= 1 MiB: {v['median_error_large']:.1%} (goal 15%); "
                      f"< 64 KiB: {v['median_error_small']:.1%} (goal 30%); geomean "
                      f"{v['geomean_error_large']:.1%} and {v['geomean_error_small']:.1%}; "
                      "oversubscription factors (held-in fit, used when ranks outnumber cores): "
                      f"per step {v['oversubscription_eta']['per_step']:.2f}, "
                      f"per byte {v['oversubscription_eta']['per_byte']:.2f}; measured inside its interval: "
                      f"{v['inside_interval']:.0%} of held-out rows (host load {v['host_noise']['loadavg']:.1f}, "
                      f"CPU steal {v['host_noise']['steal_share']:.1%})")


@app.command()
@_friendly
def predict(cluster: str = typer.Option("dgx-h100", help="dgx-h100 | dgx-h100-sharp"),
            nodes: int = typer.Option(1, help="nodes of 8 GPUs"),
            collective: str = typer.Option("allreduce", help="allreduce | allgather | reducescatter"),
            sizes: str = typer.Option("1KiB,64KiB,1MiB,256MiB,1GiB", help="LOW:HIGH or a comma list"),
            topology: str = typer.Option(None, help="read the machine off a topology instead: " + TOPO_HELP),
            gpus: int = typer.Option(8, help="GPUs of --topology"),
            sharp: bool = typer.Option(False, "--sharp", help=SHARP_HELP),
            topology_file: str = typer.Option(None, help="custom topology JSON (with --topology custom)"),
            as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """NCCL-style prediction (ring/tree x LL/LL128/Simple, NVLS, SHARP) with NCCL's tuning constants; says why.

    The same model `simulate --algorithm auto` uses (there timed flow by flow as well)."""
    from hcf_sim.collectives.nccl_model import busbw_gbps, select
    from hcf_sim.collectives.nccl_model import cluster as make
    if topology:
        from hcf_sim.simulation.nccl_flow import fabric
        c = fabric(_topo(topology, gpus, None, 1.0, topology_file, sharp)).cluster
        nodes = c.nodes
    else:
        c = make(cluster, nodes)
    out = []
    tab = Table("size", "algorithm", "protocol", "time us", "busbw GB/s", title=f"{collective} on {c.name} x {nodes}")
    for s in parse_sizes(sizes):
        ch = select(c, collective, s)
        bus = busbw_gbps(collective, c.ranks, s, ch.best.time_us)
        out.append({"size": s, "busbw_gbps": bus, **ch.to_dict()})
        tab.add_row(human_bytes(s), ch.best.algorithm, ch.best.protocol, f"{ch.best.time_us:,.2f}", f"{bus:.1f}")
    _emit(out, as_json, tab)
    if not as_json:
        for row in out:
            console.print(f"why: {row['reason']}")
        for algo, why in out[0]["excluded"].items():
            console.print(f"not considered: {algo}: {why}")


@app.command()
@_friendly
def train(compression: str = typer.Option("int8", help="none | fp16 | int8 | topk | powersgd | torch_powersgd | all"),
          ranks: int = typer.Option(2, help="gloo processes"), epochs: int = typer.Option(8, help="epochs"),
          as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """DDP-train an MLP on scikit-learn's digits with a compression hook; bytes sent, step time, accuracy vs uncompressed."""
    from hcf_sim.runtime.training import CODECS, compare
    names = list(CODECS) if compression == "all" else ["none", compression] if compression != "none" else ["none"]
    with Progress(console=Console(stderr=True), disable=as_json, transient=True) as prog:
        task = prog.add_task("training", total=len(names))
        res = compare(names, ranks, epochs, progress=lambda: prog.advance(task))
    tab = Table("compression", "MB sent/rank", "vs none", "step ms", "codec ms/step", "accuracy",
                title=f"DDP digits MLP, {ranks} gloo ranks, {epochs} epochs")
    for r in res:
        tab.add_row(r["compression"], f"{r['wire_bytes'] / 1e6:.2f}", f"{r['volume_ratio']:.1%}", f"{r['step_ms']:.2f}",
                    f"{r['codec_ms']:.2f}", f"{r['accuracy']:.2%}")
    _emit(res, as_json, tab)


@app.command("export-astra")
@_friendly
def export_astra(topology: str = typer.Option("rail", help=TOPO_HELP), nodes: int = typer.Option(16, help="GPUs"),
                 algorithm: str = typer.Option("ring", help="all-reduce implementation per dimension"),
                 out: str = typer.Option("astra_out", help="output folder")) -> None:
    """Write ASTRA-sim inputs (analytical network YAML and system JSON) for a scenario."""
    from hcf_sim.interchange import export_astra as run
    paths = run(_topo(topology, nodes, None, 1.0, None), out, algorithm)
    console.print("wrote " + ", ".join(paths))


@app.command("nccl-tests")
@_friendly
def nccl_tests(path: str = typer.Argument(..., help="an nccl-tests output file"),
               as_json: bool = typer.Option(False, "--json", help="print JSON")) -> None:
    """Read an nccl-tests output file, any layout (size, time, algbw, busbw per row, per collective)."""
    from hcf_sim.calibration.nccl_log import read_nccl_log
    runs = read_nccl_log(path)
    if as_json:
        _emit([r.to_dict() for r in runs], True)
        return
    for run in runs:
        tab = Table("size", "time us", "algbw GB/s", "busbw GB/s", "line",
                    title=f"{run.collective or '?'} ({run.ranks} ranks, {run.layout})")
        for r in run.rows:
            tab.add_row(human_bytes(r.size), f"{r.time_us:.2f}", f"{r.algbw:.2f}", f"{r.busbw:.2f}", str(r.line))
        console.print(tab)


from uol_cli.hcf_run_cmd import run_pipeline_command  # noqa: E402  (kept in its own module)

app.command("run-pipeline")(_friendly(run_pipeline_command))
