"""The `uol odl` and `uol ops` commands, as a user runs them."""

import json
import subprocess
import sys

import torch
from typer.testing import CliRunner

from uol_cli.main import app

runner = CliRunner()


def uol(*args):
    return runner.invoke(app, list(args))


def test_help_everywhere():
    for args in ([], ["odl"], ["ops"], ["odl", "show"], ["odl", "eval"]):
        result = uol(*args, "--help")
        assert result.exit_code == 0, result.output
        assert "Usage" in result.output


def test_check_ok_and_error_with_caret(tmp_path):
    good = tmp_path / "good.odl"
    good.write_text("op twice(X: f32[N]) -> Y: f32[N]:\n    Y[i] = 2 * X[i]\n")
    result = uol("odl", "check", str(good))
    assert result.exit_code == 0 and "op twice" in result.output
    bad = tmp_path / "bad.odl"
    bad.write_text("op twice(X: f32[N]) -> Y: f32[N]:\n    Y[i] = 2 * X[j]\n")
    result = uol("odl", "check", str(bad))
    assert result.exit_code == 2
    assert f"{bad}:2:16: error: index 'j' is not bound" in result.output
    assert "^" in result.output and "Traceback" not in result.output


def test_show_json_has_patterns_flops_and_bytes():
    result = uol("odl", "show", "matmul", "--shape", "M=8,N=4,K=2", "--json")
    info = json.loads(result.output)
    assert info["pattern"] == "contraction"
    assert info["flops"] == 2 * 8 * 4 * 2 and info["bytes"] == 4 * (16 + 8 + 32)
    assert info["statements"][0]["pattern"] == "contraction"


def test_eval_reads_and_writes_torch_save_dicts(tmp_path):
    a, b = torch.randn(3, 5), torch.randn(5, 2)
    torch.save({"A": a, "B": b}, tmp_path / "in.pt")
    result = uol("odl", "eval", "matmul", "--inputs", str(tmp_path / "in.pt"),
                 "--out", str(tmp_path / "out.pt"), "--json")
    assert result.exit_code == 0, result.output
    out = torch.load(tmp_path / "out.pt")
    torch.testing.assert_close(out["C"], a @ b)
    assert json.loads(result.output)["outputs"]["C"]["shape"] == [3, 2]


def test_eval_random_inputs_and_bad_shapes():
    result = uol("odl", "eval", "softmax", "--shape", "R=3,C=4", "--json")
    summary = json.loads(result.output)["outputs"]["Y"]
    assert abs(summary["mean"] - 0.25) < 1e-6  # rows of a softmax sum to one
    result = uol("odl", "eval", "softmax", "--shape", "R=3")
    assert result.exit_code == 2 and "sizes missing for C" in result.output
    result = uol("odl", "eval", "softmax", "--shape", "R=0,C=4")
    assert result.exit_code == 2 and "at least 1" in result.output


def test_ops_list_and_show():
    result = uol("ops", "list", "--json")
    rows = {row["name"]: row for row in json.loads(result.output)}
    assert rows["matmul"]["pattern"] == "contraction" and rows["softmax"]["pattern"] == "reduce"
    assert "sum[k]" in uol("ops", "show", "matmul").output
    assert uol("ops", "show", "nope").exit_code == 2


def test_console_script_exits_2_without_traceback(tmp_path):
    bad = tmp_path / "bad.odl"
    bad.write_text("op f(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] +\n")
    proc = subprocess.run([sys.executable, "-m", "uol_cli.main", "odl", "check", str(bad)],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and ":2:18: error:" in proc.stderr


def test_grad_prints_parseable_odl(tmp_path):
    result = uol("odl", "grad", "matmul")
    assert result.exit_code == 0
    path = tmp_path / "g.odl"
    path.write_text(result.output)
    assert uol("odl", "check", str(path)).exit_code == 0
    assert json.loads(uol("odl", "grad", "softmax", "--json").output)["wrt"] == ["X"]
    saves = json.loads(uol("odl", "grad", "attention", "--json").output)["notes"][-1]
    assert "s, mx, l" in saves  # by default the scores are saved, like any reduction
    wide = json.loads(uol("odl", "grad", "attention", "--recompute-wide", "--json").output)
    assert any("recomputed although a reduction" in n and n.endswith(": s") for n in wide["notes"])
