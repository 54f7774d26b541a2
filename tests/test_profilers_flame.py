"""Flame trees: pyinstrument shares, speedscope round trips, the common tree format."""

from __future__ import annotations

import json
import time

from profilers.flame import FlameNode, from_stacks, render_text
from profilers.pyinstrument_source import profile_call, profile_command
from profilers.speedscope import from_speedscope, to_speedscope, write_speedscope


def slow_step() -> None:
    time.sleep(0.15)


def fast_step() -> None:
    time.sleep(0.03)


def known_program() -> str:
    slow_step()
    fast_step()
    return "done"


def test_the_function_that_sleeps_longer_has_the_larger_share():
    prof = profile_call(known_program)
    tree = prof.tree
    assert prof.result == "done"
    slow, fast = tree.share("slow_step"), tree.share("fast_step")
    assert slow > fast > 0
    assert slow > 0.6  # 150 of 180 ms
    node = tree.find("slow_step")[0]
    assert node.file.endswith("test_profilers_flame.py") and node.line > 0
    assert tree.unit == "seconds" and abs(tree.total - prof.session.duration) < 0.05


def test_totals_are_self_plus_children():
    tree = profile_call(known_program).tree
    for _, node in tree.walk():
        assert abs(node.total - (node.self_cost + sum(c.total for c in node.children))) < 1e-6


def test_speedscope_round_trip_keeps_shares_and_locations(tmp_path):
    tree = profile_call(known_program).tree
    path = write_speedscope(tree, tmp_path / "p.speedscope.json")
    data = json.loads(path.read_text())
    assert data["$schema"].startswith("https://www.speedscope.app")
    assert data["profiles"][0]["type"] == "evented"
    back = from_speedscope(path)
    assert abs(back.share("slow_step") - tree.share("slow_step")) < 1e-6
    assert back.find("slow_step")[0].line == tree.find("slow_step")[0].line


def test_speedscope_sampled_profiles_are_read():
    data = {"shared": {"frames": [{"name": "main"}, {"name": "a"}, {"name": "b"}]},
            "profiles": [{"type": "sampled", "name": "s", "unit": "milliseconds",
                          "startValue": 0, "endValue": 4,
                          "samples": [[0, 1], [0, 1], [0, 2], [0]], "weights": [1, 1, 1, 1]}]}
    tree = from_speedscope(data)
    assert tree.find("a")[0].total == 2 and tree.find("main")[0].self_cost == 1
    assert tree.total == 4


def test_from_stacks_and_dict_round_trip():
    tree = from_stacks([([("main", "m.py", 1), ("hot", "m.py", 5)], 3.0),
                        ([("main", "m.py", 1)], 1.0)], unit="Ir")
    assert tree.total == 4 and tree.find("hot")[0].location == "m.py:5"
    assert FlameNode.from_dict(json.loads(json.dumps(tree.to_dict()))).to_dict() == tree.to_dict()
    assert "hot" in render_text(tree)
    assert to_speedscope(tree)["profiles"][0]["unit"] == "none"


def test_profile_command_captures_output_and_exit():
    def fake_cli(argv):
        print("hello", *argv)
        raise SystemExit(0)
    prof = profile_command(fake_cli, ["odl", "check"])
    assert prof.result == {"exit": 0, "stdout": "hello odl check\n"}
    assert "<html" in prof.html().lower()[:2000]
