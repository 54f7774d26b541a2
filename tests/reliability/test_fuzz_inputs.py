"""Fuzzing every text a user hands us: ODL, graph JSON, HFL TOML, topology JSON, CLI arguments.

Each input gives a result or the module's own error type with a message, never another
exception. UOL_LONG=1 runs 20x more examples (figures in docs/reliability.md).
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
from pathlib import Path

import pytest
import typer
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rel_helpers import FUZZ_COUNTS, LONG, REPO
from typer._click import core as click_core
from typer._click import exceptions as click_exc
from typer.core import TyperGroup

from hcf_sim.errors import HcfError, parse_size, parse_sizes
from hcf_sim.fabric.topology import from_json
from uol_core.acg.config import TileConfig, parse_config
from uol_core.graph import GraphError, graph_from_dict, load_graph, validate
from uol_core.hfl.loader import TARGETS_DIR, load_file
from uol_core.hfl.schema import HflError
from uol_core.odl import OdlError, parse
from uol_core.odl.shapes import ShapeError, parse_shape_spec
from uol_core.ops import list_ops, op_text

N = 2000 if LONG else 60
FUZZ = settings(max_examples=N, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
JSON = st.recursive(st.none() | st.booleans() | st.integers(-2**40, 2**40)
                    | st.floats(allow_nan=True) | st.text(max_size=12),
                    lambda kids: st.lists(kids, max_size=4)
                    | st.dictionaries(st.text(max_size=10), kids, max_size=5), max_leaves=25)
HFL_DIR = Path(tempfile.mkdtemp(prefix="uol-fuzz-"))  # one scratch folder for file inputs
SAMPLE_GRAPHS = [json.loads(p.read_text()) for p in sorted((REPO / "sample_graphs").glob("*.json"))]
TARGET_TEXTS = [p.read_text() for p in sorted(TARGETS_DIR.glob("*.toml"))[:4]]
TOPOLOGY = {"name": "t", "group_size": 2,
            "nodes": [{"id": "g0", "kind": "gpu"}, {"id": "g1", "kind": "gpu"},
                      {"id": "s", "kind": "switch"}],
            "links": [{"src": "g0", "dst": "s", "protocol": "nvlink4"},
                      {"src": "g1", "dst": "s", "bandwidth_gbps": 50, "latency_us": 2}]}


def mutate(value, data):
    """Replace, drop or retype one field somewhere inside a JSON value."""
    if isinstance(value, dict) and value:
        key = data.draw(st.sampled_from(sorted(value)))
        action = data.draw(st.sampled_from(["drop", "replace", "recurse", "recurse"]))
        out = dict(value)
        if action == "drop":
            del out[key]
        elif action == "replace":
            out[key] = data.draw(JSON)
        else:
            out[key] = mutate(value[key], data)
        return out
    if isinstance(value, list) and value:
        i = data.draw(st.integers(0, len(value) - 1))
        out = list(value)
        out[i] = mutate(value[i], data) if data.draw(st.booleans()) else data.draw(JSON)
        return out
    return data.draw(JSON)


def expect(name: str, fn, errors: tuple[type[BaseException], ...]) -> None:
    """Run fn; a result or one of `errors` (with a message) passes, anything else fails."""
    FUZZ_COUNTS[name] += 1
    start = time.perf_counter()
    try:
        fn()
    except errors as err:
        assert str(err).strip(), f"{type(err).__name__} without a message"
    assert time.perf_counter() - start < 10.0, "one input took over 10 s"


# ---- ODL -------------------------------------------------------------------------------------

ODL_ALPHABET = "abMNK_01 \n\t()[]:,+-*/<>=!.#e;{}\"'\\é\x00" + "opfsumaxwhere"


@FUZZ
@given(st.text(alphabet=ODL_ALPHABET, max_size=160) | st.text(max_size=80))
def test_odl_random_text(text):
    expect("odl", lambda: parse(text), (OdlError,))


@FUZZ
@given(st.sampled_from([op_text(n) for n in list_ops()]), st.data())
def test_odl_mutated_library(source, data):
    i = data.draw(st.integers(0, len(source)))
    j = data.draw(st.integers(i, min(len(source), i + 10)))
    text = source[:i] + data.draw(st.text(alphabet=ODL_ALPHABET, max_size=5)) + source[j:]
    expect("odl", lambda: parse(text), (OdlError,))


@FUZZ
@given(st.text(min_size=1, max_size=12))
def test_odl_names_reach_generated_code_only_as_identifiers(name):
    """A name that parses is an identifier: no raw text (comment closers, quotes) reaches C."""
    text = f"op {name}(A: f32[M]) -> Y: f32[M]:\n    Y[m] = A[m]\n"
    FUZZ_COUNTS["odl"] += 1
    try:
        op = parse(text)
    except OdlError:
        return
    assert op.name.isidentifier() and all(d.name.isidentifier() for d in op.inputs + op.outputs)


# ---- graph JSON ------------------------------------------------------------------------------

GRAPH_ERRORS = (GraphError, OdlError, ShapeError)


@FUZZ
@given(JSON)
def test_graph_random_json(data):
    expect("graph", lambda: validate(graph_from_dict(data)), GRAPH_ERRORS)


@FUZZ
@given(st.sampled_from(SAMPLE_GRAPHS), st.data())
def test_graph_mutated_samples(graph, data):
    bad = mutate(graph, data)
    expect("graph", lambda: validate(graph_from_dict(bad)), GRAPH_ERRORS)


@FUZZ
@given(st.binary(max_size=200))
def test_graph_file_bytes(raw):
    path = HFL_DIR / "graph.json"
    path.write_bytes(raw)
    expect("graph", lambda: load_graph(path), GRAPH_ERRORS)


# ---- HFL TOML --------------------------------------------------------------------------------

@FUZZ
@given(st.sampled_from(TARGET_TEXTS), st.data())
def test_hfl_mutated_targets(text, data):
    i = data.draw(st.integers(0, len(text)))
    j = data.draw(st.integers(i, min(len(text), i + 20)))
    bad = text[:i] + data.draw(st.text(alphabet="=[]\"'.,0123456789abc \n#-", max_size=8)) + text[j:]

    path = HFL_DIR / "t.toml"
    path.write_text(bad)
    expect("hfl", lambda: load_file(path), (HflError,))


# ---- HCF topology JSON -----------------------------------------------------------------------

@FUZZ
@given(JSON)
def test_topology_random_json(data):
    expect("topology", lambda: from_json(data), (HcfError,))


@FUZZ
@given(st.data())
def test_topology_mutated(data):
    bad = mutate(TOPOLOGY, data)
    expect("topology", lambda: from_json(bad), (HcfError,))


@FUZZ
@given(st.text(max_size=20))
def test_size_parsers(text):
    expect("cli-values", lambda: parse_size(text), (HcfError,))
    expect("cli-values", lambda: parse_sizes(text), (HcfError,))
    expect("cli-values", lambda: parse_shape_spec(text), (ShapeError,))
    expect("cli-values", lambda: parse_config(text, TileConfig()), (ValueError,))


# ---- every CLI argument parser ---------------------------------------------------------------

def _commands() -> list[tuple[str, click_core.Command]]:
    from uol_cli.main import app

    found: list[tuple[str, click_core.Command]] = []

    def walk(cmd: click_core.Command, path: str) -> None:
        if isinstance(cmd, TyperGroup):
            for name, sub in cmd.commands.items():
                walk(sub, f"{path} {name}".strip())
        else:
            found.append((path, cmd))

    walk(typer.main.get_command(app), "")  # typer vendors click: its own Group and errors
    return found


COMMANDS = _commands()
ARG_WORDS = st.sampled_from(["--shape", "--target", "--json", "--budget", "--config", "-1",
                             "M=1", "nan", "--nodes", "--size", "1e999", "", "--", "x" * 50,
                             "-h"]) | st.text(max_size=10)


@pytest.mark.parametrize("path", [p for p, _ in COMMANDS])
@settings(max_examples=max(N // 4, 15), deadline=None, database=None)
@given(args=st.lists(ARG_WORDS, max_size=6))
def test_cli_argument_parsers(path, args):
    """Parsing (not running) any argv gives a context or a click usage error with a message."""
    cmd = dict(COMMANDS)[path]

    def parse_args() -> None:
        with contextlib.suppress(typer.Exit):  # -h / --help end the parse on purpose
            cmd.make_context(f"uol {path}", list(args), resilient_parsing=False)

    expect("cli-argv", parse_args, (click_exc.ClickException,))
