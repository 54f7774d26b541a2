"""The per-layer benchmark runs end to end at toy sizes and writes every field its table reads."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import layer_bench  # noqa: E402

KINDS = {"conv3x3", "conv1x1", "depthwise3x3", "strided3x3", "linear", "attention", "layernorm",
         "groupnorm"}


def test_tiny_run_writes_every_layer_kind(tmp_path: Path) -> None:
    out = tmp_path / "layers.json"
    layer_bench.main(["--size", "tiny", "--repeat", "4", "--packing", "both", "--out", str(out)])
    report = json.loads(out.read_text())
    assert {r["kind"] for r in report["rows"]} == KINDS
    host = report["host"]
    assert host["cpu"] and host["isa"] and host["threads"] >= 1
    assert host["probed_fp32_peak_gflops"] > 0
    assert isinstance(host["threadpools"], list)
    assert len(report["load_average_start"]) == 3 and len(report["load_average_end"]) == 3
    for row in report["rows"]:
        assert row["verified"], row
        assert row["uol_ms"] > 0 and row["torch_ms"] > 0
        assert row["ratio"] == row["torch_ms"] / row["uol_ms"]
        assert row["ratio_q1"] <= row["ratio_round_median"] <= row["ratio_q3"]
        assert row["rounds"] == 4
    linears = [r for r in report["rows"] if r["kind"] == "linear"]
    assert [r["layer"].split()[0] for r in linears] == ["M=1", "M=8"]
    assert all("c" in r["engines"] for r in linears), "a linear layer runs a C GEMM"
    assert all(r["packed_vs_unpacked"]["ratio"] > 0 for r in linears)
    for r in linears:
        share = r["kernel_packing"]
        assert share["best_us"]["per_call"] > 0 and share["best_us"]["prepacked"] > 0
        assert share["share_best"] == 1 - share["best_us"]["prepacked"] / share["best_us"]["per_call"]
        assert "threads=1" in share["config"]
    assert "--out" not in report["command"]  # where the JSON went is no part of the command
    rows = [line for line in layer_bench.table(report) if line.startswith("| ") and "---" not in line]
    assert len(rows) == 1 + len(report["rows"])
    packing = [line for line in layer_bench.packing_table(report) if line.startswith("| M=")]
    assert len(packing) == len(linears)
    md = tmp_path / "layers.md"
    layer_bench.write_markdown("Every layer", ["first"], md)
    layer_bench.write_markdown("Packing", ["second"], md)
    layer_bench.write_markdown("Every layer", ["third"], md)
    text = md.read_text()
    assert "third" in text and "second" in text and "first" not in text


def test_ratio_stats_spread_brackets_the_median() -> None:
    stats = layer_bench.ratio_stats([2.0, 4.0, 3.0, 6.0, 2.0], [1.0, 2.0, 1.0, 2.0, 2.0])
    assert stats["ratio"] == 3.0 / 2.0
    assert stats["ratio_q1"] <= stats["ratio_round_median"] <= stats["ratio_q3"]
    assert stats["ratio_round_median"] == 2.0
