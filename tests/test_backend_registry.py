"""The backend registry and the one Space/Config contract: every caller asks the registry, and
every backend, op and target shows its own knobs."""

from __future__ import annotations

import os
import re
from dataclasses import replace
from pathlib import Path

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before importorskip imports triton

import uol_core
from uol_core.acg.space_core import Config
from uol_core.backends import backend_choices, get_backend, kernel_backend_names, resolve_name
from uol_core.ops import load_op

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("uol_core", "uol_cli", "app", "profilers", "hcf_sim")
# A backend switch: comparing a backend variable with a backend's name, testing membership in
# a literal list of names, or a literal tuple of backend names.
NAMES = r"""['"](?:c|triton|reference)['"]"""
SWITCH = re.compile(
    rf"backend\w*['\"]?\]?\s*(?:==|!=)\s*{NAMES}"
    rf"|{NAMES}\s*(?:==|!=)\s*\w*backend"
    r"|backend\w*['\"]?\]?\s*(?:not\s+)?in\s*[(\[{]\s*['\"]"
    r"|BACKENDS\s*=\s*[(\[]\s*['\"]"
    rf"|\{{\s*{NAMES}\s*:")
# Places that name a *language* or a file kind, not a backend (justified one by one).
ALLOWED = {
    # the code viewer's syntax highlighter: a kernel language -> pygments lexer
    ("app/components/codeview.py", '{"triton": "python", "c": "c"}'),
}


def test_no_module_outside_the_registry_switches_on_a_backend_name():
    found = []
    for package in SCANNED:
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel.startswith("uol_core/backends/"):
                continue
            for number, line in enumerate(path.read_text().splitlines(), 1):
                match = SWITCH.search(line)
                if match and not any(rel == f and text in line for f, text in ALLOWED):
                    found.append(f"{rel}:{number}: {line.strip()}")
    assert not found, "backend switches outside uol_core/backends:\n" + "\n".join(found)


def test_the_switch_pattern_catches_what_it_should():
    for line in ('if backend == "c":', 'if state["backend"] != "triton":',
                 'if backend in ("c", "triton"):', 'BACKENDS = ("c", "triton")',
                 'BUILDERS = {"c": _build_c}'):
        assert SWITCH.search(line), line
    assert not SWITCH.search('backend = get_backend(name)')


def test_registry_rows_and_auto():
    assert backend_choices() == ("auto", "c", "triton", "reference")
    assert kernel_backend_names() == ("c", "triton")
    assert resolve_name("auto", "avx2-desktop") == "c"
    assert resolve_name("auto", "h100-sxm") == "triton"
    with pytest.raises(ValueError, match="unknown backend 'cuda'"):
        get_backend("cuda")
    hashes = {get_backend(name).hash() for name in ("c", "triton", "reference")}
    assert len(hashes) == 3


@pytest.mark.parametrize("name", ["c", "triton", "reference"])
def test_every_backend_follows_the_contract(name):
    backend = get_backend(name)
    op = load_op("softmax")
    sizes = {"R": 8, "C": 16}
    plan = backend.plan(op, sizes, "avx2-desktop")
    choice = backend.choose(plan)
    space = backend.space(op, sizes, "avx2-desktop")
    assert space.configs and not space.violated(choice.config)
    source = backend.emit(plan, choice.config)
    assert source.text and source.op_name == "softmax"


def test_config_is_frozen_hashable_and_keyed():
    cfg = Config({"threads": 2, "chunk": 0})
    assert cfg.key() == "threads=2,chunk=0" and {cfg: 1}[Config(cfg)] == 1
    with pytest.raises(TypeError, match="frozen"):
        cfg["threads"] = 4
    assert cfg.replace(chunk=4)["chunk"] == 4 and cfg["chunk"] == 0


def test_tile_config_converts_to_and_from_config():
    from uol_core.acg.config import TileConfig

    tile = TileConfig(isa="avx2", mr=4, nr=16)
    assert TileConfig.from_config(tile.to_config()) == tile
    with pytest.raises(ValueError, match="unknown config key"):
        TileConfig.from_config({"BLOCK": 64})


def test_compile_takes_odl_text_on_triton():
    pytest.importorskip("triton")
    text = "op twice(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] * 2\n"
    kernel = uol_core.compile(text, shapes={"X": (32,)}, backend="triton")
    x = torch.randn(32)
    assert kernel.backend == "triton" and torch.allclose(kernel(X=x), 2 * x)
    assert kernel.explain().legal_configs == len(get_backend("triton").space(
        kernel.op, kernel.sizes, "host").configs)


def test_public_api_exports():
    for name in ("compile", "to_torch", "run", "tune", "explain"):
        assert callable(getattr(uol_core, name))
    y = uol_core.run("softmax", X=torch.zeros(2, 4))
    assert torch.allclose(y, torch.full((2, 4), 0.25))


def test_ide_knobs_render_pattern_spaces_and_scope_isa_rules():
    from app.services.knobs import space_for

    softmax = load_op("softmax").source
    knobs = space_for(softmax, "c", "avx2-desktop", (("C", 64), ("R", 64)))
    names = {row["name"] for row in knobs.knob_rows(knobs.default)}
    assert names and names <= {"threads", "chunk", "vec", "fuse", "stream"}

    gemm = load_op("matmul").source
    knobs = space_for(gemm, "c", "xeon-spr-8480", (("K", 256), ("M", 256), ("N", 256)))
    cfg = knobs.resolve({"isa": "avx512", "threads": 1, "par": "jr"})
    rows = {row["name"]: row for row in knobs.knob_rows(cfg)}
    assert any(not o["disabled"] for o in rows["mr"]["options"] if o["value"] != cfg["mr"])
    # the AVX2 register file rule (16 registers) judges AVX2 configs only: switching isa may
    # meet it, no other knob of an AVX-512 config does
    reasons = " ".join(o["reason"] for name, row in rows.items() if name != "isa"
                       for o in row["options"])
    assert "<= 32" in reasons and "<= 16" not in reasons


def test_tuning_keys_name_the_backend_hash_and_read_the_older_keys(tmp_path, monkeypatch):
    """A session's key names the backend's generator hash (every file its emitters import and
    its compile flags), found without emitting a kernel; rows under the key's older spelling
    (the hash of fewer files, then the template's name) are read as its own."""
    from uol_core.acg.session import open_session
    from uol_core.backends import c
    from uol_core.backends.c.backend import GENERATOR_FILES
    from uol_core.backends.c.conv import emitter as c_conv
    from uol_core.backends.c.rows import emitter as c_rows
    from uol_core.runtime.tuningdb import TuningDB

    db = TuningDB(str(tmp_path / "tuning.sqlite"))
    backend = get_backend("c")
    c_hash = backend.hash()
    emitted = []
    monkeypatch.setattr(c, "emit", lambda *args: emitted.append(args))
    keys = {}
    for name, sizes in (("softmax", {"R": 8, "C": 16}), ("matmul", {"M": 8, "N": 8, "K": 8}),
                        ("conv2d", {"N": 1, "C": 2, "H": 6, "W": 6, "K": 2, "R": 3, "S": 3})):
        session = open_session(load_op(name), sizes, "avx2-desktop", db=db, replay=True)
        keys[name] = session.key
        session.close()
    assert not emitted  # the key is the plan and the hash: no kernel emitted to learn it
    assert {k.generator for k in keys.values()} == {c_hash}
    (older,) = backend.older_generators()
    assert keys["softmax"].older == (older,)
    db.record(keys["softmax"], "threads=1", {"status": "ok", "gflops": 2.0, "median_s": 1.0})
    legacy = replace(keys["softmax"], generator=f"{older}{c_rows.GENERATOR}", older=())
    db.record(legacy, "threads=2", {"status": "ok", "gflops": 3.0, "median_s": 1.0})
    other = replace(keys["conv2d"], generator=f"{older}{c_conv.GENERATOR}", older=())
    db.record(other, "threads=2", {"status": "ok", "gflops": 5.0, "median_s": 1.0})
    assert [r["config"] for r in db.rows(keys["softmax"])] == ["threads=1", "threads=2"]
    assert db.best(keys["softmax"])["config"] == "threads=2"
    assert db.rows(keys["conv2d"])[0]["gflops"] == 5.0
    assert db.rows(replace(keys["softmax"], older=())) == db.rows(keys["softmax"])[:1]
    # the hash covers the platform files and the shared plans, not only the templates
    root = ROOT / "uol_core"
    hashed = {p.relative_to(root).as_posix() for pattern in GENERATOR_FILES
              for p in root.glob(pattern)}
    assert {"backends/c/platforms/avx2.py", "plans/gemm.py", "backends/c/rows/emitter.py"} <= hashed
