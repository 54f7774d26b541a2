"""What the IDE's Graph page and `uol graph show` draw is the plan the run builds: sibling GEMMs
merged and views folded before fusion (`plan_graph`), so the kernels shown are the kernels
timed; a module that does not take its example input is an error line, not a traceback."""

from __future__ import annotations

from typer.testing import CliRunner

from uol_cli.main import app as cli
from uol_core.graph import compile_graph, plan_graph
from uol_core.graph.export_import import import_model
from uol_core.graph.zoo import build


def _groups(plan) -> list[tuple[str, tuple[str, ...], str]]:
    return [(g.name, tuple(g.nodes), g.kind) for g in plan.groups]


def test_the_shown_plan_is_the_plan_that_runs():
    from app.services.graphs import structure

    for name in ("convnext_block", "encoder_pre_norm"):  # a folded view; sibling q, k, v GEMMs
        graph = import_model(*build(name, "small"))
        plan = plan_graph(graph)
        assert _groups(plan) == _groups(compile_graph(graph).plan)
        assert plan.view_folds or plan.siblings, name  # the rewrites the unplanned graph lacks
        shown = structure(graph)
        assert set(shown["nodes"]) == {n.name for n in plan.graph.nodes}
        assert len(set(shown["groups"].values())) == len(plan.groups)
        assert shown["kernels"] == sum(g.kind == "odl" for g in plan.groups)
        rewrites = [d for d in shown["decisions"] if d["producer"].startswith("view ")
                    or " + " in d["producer"]]
        assert len(rewrites) == len(plan.view_folds) + len(plan.siblings)


def test_show_prints_the_rewrites_and_a_wrong_input_shape_is_one_error_line():
    runner = CliRunner()
    result = runner.invoke(cli, ["graph", "show", "uol_core.graph.zoo:ConvNeXtBlock",
                                 "--input-shape", "1,96,8,8"])
    assert result.exit_code == 0, result.output
    assert "view permute_1 read by add_op: folded" in result.output
    result = runner.invoke(cli, ["graph", "show", "uol_core.graph.zoo:ConvNeXtBlock",
                                 "--input-shape", "1,16,8,8"])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "does not run on inputs of shape [(1, 16, 8, 8)]" in result.output
    assert "expected input[1, 16, 8, 8] to have 96 channels" in result.output
