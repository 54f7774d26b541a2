"""Every shipped HFL target loads, has provenance on every number, and says sensible things."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from uol_cli.main import app
from uol_core.hfl import list_targets, load_target
from uol_core.hfl.loader import TARGETS_DIR
from uol_core.hfl.schema import FIELDS, PROVENANCE_KINDS

SHIPPED = [p.stem for p in sorted(TARGETS_DIR.glob("*.toml"))]


def test_at_least_sixteen_targets_and_host_listed() -> None:
    names = list_targets()
    assert len(SHIPPED) >= 16
    assert "host" in names
    for needed in ("a100-sxm-80gb", "h100-sxm", "h200-sxm", "b200", "l40s", "rtx-4090",
                   "mi250x", "mi300x", "xeon-spr-8480", "epyc-genoa-9654", "epyc-turin-9755",
                   "avx2-desktop", "grace-neoverse-v2", "graviton3", "mobile-a78",
                   "raspberry-pi-5"):
        assert needed in names


@pytest.mark.parametrize("name", SHIPPED)
def test_every_target_loads_with_provenance_on_every_field(name: str) -> None:
    target = load_target(name)
    assert target.name == name
    for fname, (_tag, kinds, required) in FIELDS.items():
        if required and target.kind in kinds:
            assert getattr(target, fname) not in (None, [], {}), fname
    facts = target.facts()
    assert len(facts) >= 12
    for field, value, prov in facts:
        assert value is not None
        assert prov.kind in PROVENANCE_KINDS, field
        assert prov.source.strip(), f"{name}.{field} has no source"
    assert target.provenance("peak_gflops").kind in PROVENANCE_KINDS


@pytest.mark.parametrize("name", SHIPPED)
def test_numbers_are_self_consistent(name: str) -> None:
    t = load_target(name)
    assert t.peak_gflops["fp32"] > 0 and t.mem_bandwidth_gbps > 0
    if "fp64" in t.peak_gflops:
        assert t.peak_gflops["fp64"] <= t.peak_gflops["fp32"] * 1.01
    for low in ("bf16", "fp16", "fp8", "int8"):
        if low in t.peak_gflops:
            assert t.peak_gflops[low] >= t.peak_gflops["fp32"]
    if t.kind == "gpu":
        assert t.smem_per_block_bytes <= t.smem_per_block_optin_bytes <= t.smem_per_sm_bytes
        assert t.max_threads_per_block % t.warp_size == 0
        assert t.vector_bits is None
    else:
        assert t.vector_bits in (128, 256, 512)
        # a CPU peak is cores x FMA units x lanes x 2 x clock, within 35 % (turbo / AMX aside)
        lanes = t.vector_bits // 32
        computed = t.cores * t.fma_units * lanes * 2 * t.clock_ghz
        assert 0.65 < t.peak_gflops["fp32"] / computed < 1.35, (computed, t.peak_gflops)
    for shapes in t.mma_shapes.values():
        assert all(len(s) == 3 for s in shapes)


def test_datasheet_sources_name_a_document() -> None:
    for name in SHIPPED:
        for field, _, prov in load_target(name).facts():
            if prov.kind == "datasheet":
                assert len(prov.source) > 15, f"{name}.{field}: '{prov.source}'"


def test_cli_list_json_lists_every_target(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path))  # host not probed: listed, not measured
    result = CliRunner().invoke(app, ["hw", "list", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.output)
    assert len(rows) >= 17
    host = next(r for r in rows if r["name"] == "host")
    assert host["probed"] is False
    assert all(r["peak_gflops"]["fp32"] > 0 for r in rows if r["name"] != "host")


def test_cli_show_json_and_text() -> None:
    runner = CliRunner()
    result = runner.invoke(app, ["hw", "show", "h100-sxm", "--json"])
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["fields"]["cores"] == {"value": 132, "prov": "datasheet",
                                         "source": record["fields"]["cores"]["source"]}
    assert "H100" in record["fields"]["peak_gflops.fp32"]["source"]
    text = runner.invoke(app, ["hw", "show", "raspberry-pi-5"])
    assert text.exit_code == 0 and "assumed" in text.output


def test_cli_unknown_target_is_a_clear_error() -> None:
    result = CliRunner().invoke(app, ["hw", "show", "h1000"])
    assert result.exit_code == 2
    assert "no target named 'h1000'" in result.output and "h100-sxm" in result.output
