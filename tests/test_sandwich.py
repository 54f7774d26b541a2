"""The sandwich view: functions summed over every call site, one function's callers and callees."""

from __future__ import annotations

import pytest

from profilers.figures.sandwich_chart import sandwich_figure
from profilers.flame import from_stacks
from profilers.sandwich import callees, callers, function_table


def frames(*names: str) -> list[tuple[str, str, int]]:
    return [(n, "k.c", i + 1) if n.startswith("k") else (n, "", 0) for i, n in enumerate(names)]


@pytest.fixture
def tree():
    # main calls a (which calls work) and b (which calls work); work recurses once under b
    return from_stacks([
        (frames("main", "a", "work"), 3.0),
        (frames("main", "b", "work"), 2.0),
        (frames("main", "b", "work", "work"), 1.0),
        (frames("main", "b"), 0.5),
        (frames("main"), 0.25),
    ], unit="Ir")


def test_function_table_sums_self_everywhere_and_total_once_under_recursion(tree):
    table = {r.name: r for r in function_table(tree)}
    assert table["work"].self_cost == 6.0
    # the recursive inner call is inside the outer one's total: counted once
    assert table["work"].total == 3.0 + 3.0
    assert table["work"].occurrences == 3
    assert table["b"].total == 3.5 and table["b"].self_cost == 0.5
    assert table["main"].total == 6.75
    assert function_table(tree)[0].name == "work"  # heaviest self first


def test_callers_are_the_stacks_reversed_weighted_by_the_calls(tree):
    up = callers(tree, ("work", "", 0))
    assert up.total == 6.0
    assert {c.name: c.total for c in up.children} == {"a": 3.0, "b": 3.0}
    b = next(c for c in up.children if c.name == "b")
    assert [c.name for c in b.children] == ["main"] and b.children[0].total == 3.0
    assert up.self_cost == 0.0  # every call of work has a caller


def test_callees_merge_every_outermost_call(tree):
    down = callees(tree, ("b", "", 0))
    assert down.total == 3.5 and down.self_cost == 0.5
    work = down.children[0]
    assert work.name == "work" and work.total == 3.0 and work.children[0].total == 1.0
    assert callees(tree, ("work", "", 0)).total == 6.0


def test_sandwich_figure_has_the_table_and_both_icicles(tree):
    fig = sandwich_figure(tree, ("work", "", 0), title="t")
    kinds = [t.type for t in fig.data]
    assert kinds == ["table", "icicle", "icicle"]
    assert fig.data[0].cells.values[0][0] == "work"
    assert fig.data[1].labels[0] == "work" and fig.data[2].labels[0] == "work"
    assert "sandwich of work" in fig.layout.title.text
