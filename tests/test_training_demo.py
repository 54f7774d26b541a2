"""The training demo as a user runs it: torch and UOL models trained in lockstep, and under DDP."""

import json
import math

from typer.testing import CliRunner

from hcf_sim.runtime.compression import ddp_hook
from uol_cli.main import app
from uol_cli.training_demo import run_ddp, run_demo


def test_uol_model_follows_torch_loss_curve():
    result = run_demo(steps=25)
    torch_losses, uol_losses = result["torch"]["losses"], result["uol"]["losses"]
    # the whole MLP runs as one UOL op, and its update as one more
    assert result["uol"]["swapped"] == ["0-5 (mlp)", "SGD (momentum)"]
    assert len(uol_losses) == 25 and uol_losses[-1] < 0.5 * uol_losses[0]  # it learns
    assert result["final_loss_relative_gap"] < 1e-3
    assert max(abs(a - b) for a, b in zip(torch_losses, uol_losses)) < 1e-3
    assert abs(result["torch"]["accuracy"] - result["uol"]["accuracy"]) <= 0.01
    assert result["speedup_vs_torch_eager"] > 0


def test_cli_train_demo_json():
    out = CliRunner().invoke(app, ["train-demo", "--steps", "8", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["steps"] == 8 and len(data["uol"]["losses"]) == 8
    assert data["optimizer"] == "uol"


def test_cli_train_demo_with_torchs_optimizer_differs_only_in_layers():
    out = CliRunner().invoke(app, ["train-demo", "--steps", "6", "--json", "--optimizer", "torch"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["uol"]["swapped"] == ["0-5 (mlp)"] and data["optimizer"] == "torch"
    bad = CliRunner().invoke(app, ["train-demo", "--steps", "6", "--optimizer", "adam"])
    assert bad.exit_code != 0 and "unknown optimizer 'adam'" in bad.output


def test_ddp_with_hcf_compression_trains_on_two_gloo_processes():
    ranks = run_ddp(steps=12, world=2, hook_factory=ddp_hook,
                    hook_arg="int8")
    assert [r["rank"] for r in ranks] == [0, 1]
    for r in ranks:
        assert all(math.isfinite(x) for x in r["losses"])
        assert r["losses"][-1] < r["losses"][0]
