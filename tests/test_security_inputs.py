"""Inputs are values, never paths: custom topologies, target names (CLI and IDE)."""

from __future__ import annotations

import json
import sys

import pytest
from typer.testing import CliRunner

from hcf_sim.errors import HcfError

OPENED: list[str] = []
_WATCHING = [False]


def _audit(event: str, args: tuple) -> None:
    if _WATCHING[0] and event == "open" and args and isinstance(args[0], str | bytes):
        OPENED.append(str(args[0]))


sys.addaudithook(_audit)  # audit hooks cannot be removed: it records only while watching


class files_opened:
    """Context manager: the paths Python opened inside the block."""

    def __enter__(self) -> list[str]:
        OPENED.clear()
        _WATCHING[0] = True
        return OPENED

    def __exit__(self, *exc) -> None:
        _WATCHING[0] = False


@pytest.fixture
def planted(tmp_path):
    """A readable JSON with a secret, as an attacker would aim the simulator at."""
    path = tmp_path / "secret.json"
    path.write_text(json.dumps({"nodes": [{"id": "TOPSECRET-42", "kind": "gpu"}], "links": []}))
    return path


def _refusal(custom) -> str:
    from app.services.comm import build

    with files_opened() as opened, pytest.raises(HcfError) as info:
        build("custom", 8, None, 1.0, custom)
    assert not [p for p in opened if "secret" in p or p.startswith("/etc")], opened
    return str(info.value)


def test_custom_topology_given_as_a_path_is_refused_without_touching_it(planted):
    said = {_refusal(str(planted)), _refusal("/etc/shadow"), _refusal("/no/such/file.json")}
    assert len(said) == 1  # the same words for a file that exists and one that does not
    message = said.pop()
    assert "uploaded through the page" in message and "paths are not accepted" in message
    assert "TOPSECRET" not in message
    assert "uploaded through the page" in _refusal(["nodes", "links"])


@pytest.mark.parametrize("bad", ["gpu\x00one", "a\nb", "x" * 200, ""])
def test_topology_and_node_names_are_checked(bad):
    from app.services.comm import build

    node = {"nodes": [{"id": bad, "kind": "gpu"}, {"id": "b", "kind": "gpu"}],
            "links": [{"src": bad, "dst": "b"}]}
    with pytest.raises(HcfError, match="printable characters"):
        build("custom", 2, None, 1.0, node)
    named = {"name": bad, "nodes": [{"id": "a"}, {"id": "b"}], "links": [{"src": "a", "dst": "b"}]}
    with pytest.raises(HcfError, match="printable characters"):
        build("custom", 2, None, 1.0, named)


def test_an_uploaded_topology_object_still_simulates():
    from app.services.comm import build, simulate

    topo = build("custom", 2, None, 1.0, {"name": "pair", "nodes": [{"id": "g0"}, {"id": "g1"}],
                                          "links": [{"src": "g0", "dst": "g1"}]})
    assert simulate(topo, "allreduce", 1 << 20, "auto")["time"] > 0


@pytest.mark.parametrize("name", ["../../../pyproject", "/etc/passwd", "targets/h100-sxm",
                                  "h100-sxm.toml", "..", "h100-sxm\0", ""])
def test_target_names_are_names_never_paths(name):
    from uol_core.hfl import HflError, load_target

    with files_opened() as opened, pytest.raises(HflError, match="no target named") as info:
        load_target(name)
    assert not [p for p in opened if p.endswith(".toml") or "passwd" in p], opened
    assert "h100-sxm" in str(info.value)  # the known names, to pick from


def test_cli_target_option_refuses_a_path(tmp_path):
    from uol_cli.main import app

    result = CliRunner().invoke(app, ["compile", "matmul", "--target", "../../../pyproject"])
    assert result.exit_code == 2
    assert "no target named '../../../pyproject'" in result.output
    assert "build-system" not in result.output  # nothing of pyproject.toml was read


def test_ide_target_select_refuses_a_path():
    """What the Studio's target select posts goes through compile_odl."""
    from app.services.kernels import compile_odl
    from uol_core.ops import op_text

    with files_opened() as opened:
        res = compile_odl(op_text("matmul"), "c", "../../../pyproject", {"M": 8, "N": 8, "K": 8})
    assert not res.ok and "no target named" in res.error
    assert not [p for p in opened if p.endswith("pyproject.toml")], opened
