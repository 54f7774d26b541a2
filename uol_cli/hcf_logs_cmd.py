"""`uol hcf calibrate --from` and `uol hcf validate --from`: fit and check the model on nccl-tests logs.

Deferred imports: each command imports its engine (compiler, simulator, profilers, remote
workers) when it runs, so `uol --help` and the other commands stay fast.
"""

from __future__ import annotations

import json

from rich.table import Table

from hcf_sim.errors import human_bytes
from uol_cli.hcf_cmd import _emit, console


def calibrate_logs(paths: list[str], collective: str | None, ranks: int | None, save: str | None,
                    as_json: bool) -> None:
    """Fit the model to the logs; optionally save the fitted cluster as a topology JSON."""
    from pathlib import Path

    from hcf_sim.calibration.nccl_fit import calibrate_from_logs, preset_topology
    fit = calibrate_from_logs(paths, collective, ranks)
    data = fit.to_dict()
    if save:
        preset = preset_topology(fit, f"calibrated-{Path(paths[0]).stem}"[:100])
        Path(save).write_text(json.dumps(preset, indent=1))
        data["saved"] = save
    tab = Table("sizes", "latency us", "busbw GB/s",
                title=f"{fit.collective} on {fit.ranks} ranks, fitted on {len(fit.fit_sizes)} sizes "
                      f"(median error {fit.fit_error:.1%})")
    for g in fit.regimes:
        tab.add_row(f"{human_bytes(g.lo)} - {human_bytes(g.hi)}", f"{g.latency_us:.2f}", f"{g.busbw_gbps:.1f}")
    _emit(data, as_json, tab)
    if save and not as_json:
        console.print(f"saved {save}: load it on the Communication page (Upload topology JSON)")


def validate_logs(paths: list[str], collective: str | None, ranks: int | None, as_json: bool) -> None:
    """Held-out errors: fit on every other size, predict the rest and the other collectives."""
    from hcf_sim.calibration.nccl_fit import validate_from_logs
    v = validate_from_logs(paths, collective, ranks)
    tab = Table("held out", "collective", "size", "measured us", "predicted us", "error",
                title=f"fitted on every other size of {v['fit']['collective']} ({v['fit']['ranks']} ranks)")
    for r in v["rows"]:
        tab.add_row(r["kind"], r["collective"], human_bytes(r["size"]), f"{r['measured_us']:,.2f}",
                    f"{r['predicted_us']:,.2f}", f"{r['error']:.1%}")
    _emit(v, as_json, tab)
    if not as_json:
        for kind, bands in v["summary"].items():
            console.print(f"{kind}: " + "; ".join(f"{b} median {x['median']:.1%} (geomean "
                                                   f"{x['geomean']:.1%}, n={x['n']})" for b, x in bands.items()))
