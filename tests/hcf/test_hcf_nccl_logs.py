"""nccl-tests logs in every layout; calibration and held-out validation from them; the CLI."""

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from hcf_sim.calibration.nccl_fit import (
    calibrate_from_logs,
    fit_envelope,
    preset_topology,
    validate_from_logs,
)
from hcf_sim.calibration.nccl_log import parse_nccl_log, read_nccl_log
from hcf_sim.errors import HcfError
from uol_cli.hcf_cmd import app

FIX = Path(__file__).parent / "fixtures" / "nccl_tests"
REFUSED = {"damaged_row.txt": 32, "rows_without_header.txt": 1}


def test_older_layout_gives_the_files_times_not_the_roots_decimals():
    run = read_nccl_log(FIX / "all_reduce_old_layout.txt")[0]
    by_size = {r.size: r for r in run.rows}
    assert by_size[1 << 30].time_us == pytest.approx(3975.58)
    assert by_size[1024].time_us == pytest.approx(22.00)
    assert by_size[1024].root is None and by_size[1024].wrong == "0e+00"
    assert run.ranks == 2 and run.collective == "all_reduce" and "no root" in run.layout
    assert by_size[1 << 30].in_place_time_us is not None


@pytest.mark.parametrize("name", sorted(p.name for p in FIX.glob("*.txt")))
def test_every_fixture_parses_or_is_refused_with_its_line(name):
    if name in REFUSED:
        with pytest.raises(HcfError, match=rf"{name}:{REFUSED[name]}:"):
            read_nccl_log(FIX / name)
        return
    runs = read_nccl_log(FIX / name)
    assert runs and all(r.rows for r in runs)
    for run in runs:  # every row agrees with its own algbw = size / time
        for r in run.rows:
            assert r.algbw == pytest.approx(r.size / (r.time_us * 1e3), abs=0.011, rel=0.02)


def test_launcher_prefixes_change_nothing():
    tagged = (FIX / "all_reduce_tag_output.txt").read_text()
    plain = "\n".join(line.split("<stdout>:", 1)[-1] for line in tagged.splitlines())
    a, b = parse_nccl_log(tagged)[0], parse_nccl_log(plain)[0]
    assert [r.time_us for r in a.rows] == [r.time_us for r in b.rows] and a.ranks == 8
    # rank prefixes in mid-line (interleaved ranks) and srun labels
    text = ("#  Rank  0 Group  0 Pid 1 on h device  0 [0x07] H100\n"
            "#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
            "[0]      1048576        262144     float     sum      -1[0]    1626.5    0.64    1.24      0\n"
            "3:      2097152        524288     float     sum      -1    2325.3    0.90    1.73      0\n")
    rows = parse_nccl_log(text)[0].rows
    assert [r.time_us for r in rows] == [1626.5, 2325.3]


def test_multi_collective_na_validation_and_nccl1_layouts():
    runs = read_nccl_log(FIX / "multi_collective_h100.txt")
    assert [r.collective for r in runs] == ["all_reduce", "all_gather", "reduce_scatter"]
    assert all(r.ranks == 8 and r.avg_busbw is not None for r in runs)
    na = read_nccl_log(FIX / "all_reduce_validation_na.txt")[0]
    assert all(r.wrong == "N/A" and r.in_place_time_us is None for r in na.rows) and na.ranks == 4
    old = read_nccl_log(FIX / "nccl1_layout.txt")[0]
    assert old.rows[0].time_us == pytest.approx(64.0)  # printed in ms by the NCCL 1.x tests


def test_a_row_that_disagrees_with_its_algbw_is_refused_with_its_line():
    text = ("#       size         count      type   redop    root     time   algbw   busbw #wrong\n"
            "        1024           256     float     sum      -1    22.00    9.99    9.99      0\n")
    with pytest.raises(HcfError, match=r"x\.txt:2: .*algbw 9.99 does not match"):
        parse_nccl_log(text, "x.txt")


def test_envelope_fit_recovers_two_protocol_lines():
    sizes = [1 << k for k in range(3, 31)]
    times = [min(15 + s / 80e3, 25 + s / 280e3) for s in sizes]
    lines, err = fit_envelope(sizes, times)
    assert err < 1e-6
    assert min(a for a, *_ in lines) == pytest.approx(15, rel=1e-3)


def test_held_out_sizes_within_ten_percent_and_collectives_reported():
    v = validate_from_logs([str(FIX / "multi_collective_h100.txt")])
    sizes = v["summary"]["held-out size"]
    assert all(band["median"] < 0.10 for band in sizes.values())
    assert "held-out collective" in v["summary"]
    fitted = set(v["fit"]["fit_sizes"])
    assert not any(r["size"] in fitted for r in v["rows"] if r["kind"] == "held-out size")


def test_calibrated_preset_loads_on_the_comm_page_and_reproduces_the_fit():
    from app.services.comm import build, check_custom
    from hcf_sim.service import simulate

    fit = calibrate_from_logs([str(FIX / "all_reduce_h100_current.txt")])
    preset = json.loads(json.dumps(preset_topology(fit, "calibrated-h100")))
    topo = build("custom", 8, custom=check_custom(preset))
    big = max(fit.regimes, key=lambda g: g.busbw_gbps)
    size = 1 << 30
    res = simulate(topo, "allreduce", size, "ring", "analytical")
    expect_us = big.latency_us + size * 1.75 / (big.busbw_gbps * 1e3)
    assert res.time * 1e6 == pytest.approx(expect_us, rel=1e-6)


def test_cli_validate_and_calibrate_from_logs(tmp_path):
    runner = CliRunner()
    r = runner.invoke(app, ["validate", "--from", str(FIX / "all_reduce_h100_current.txt"), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.output)["summary"]["held-out size"]
    out = tmp_path / "preset.json"
    r = runner.invoke(app, ["calibrate", "--from", str(FIX / "all_reduce_old_layout.txt"), "--save", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["calibration"]["ranks"] == 2
    r = runner.invoke(app, ["nccl-tests", str(FIX / "damaged_row.txt")])
    assert r.exit_code == 2 and "damaged_row.txt:32" in r.output
    r = runner.invoke(app, ["calibrate", "--from", str(FIX / "nccl1_layout.txt")])
    assert r.exit_code == 2 and "collective" in r.output
