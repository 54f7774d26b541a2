"""Names, never paths: every callback input that names an op, graph, model, target, run, trace
or file is looked up in a closed set. Each such callback is replayed with absolute and `../`
paths to a canary file (as the bare value and inside the stores' objects); the canary's text
never comes back in a response, a stored record or a log, and the server process never opens
it nor lists its folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from pathlib import Path

import pytest
import requests
from rel_helpers import auth_headers

SECRET = "CANARY-5b1e9d-SECRET"
# Every (component, property) a client sends that names something: refused unless it is one of
# the closed set the page offered. A new callback input of this kind must be added here (the
# classification test below fails until it is).
NAME_FIELDS = {
    ("op-select", "value"), ("debug-op", "value"), ("profile-op", "value"),
    ("graph-sample", "value"), ("graph-model", "value"), ("graph-source", "data"),
    ("graph-zoo", "value"),
    ("graph-upload-data", "data"), ("ktrain-model", "value"), ("ktrain-run", "data"),
    ("train-run", "data"), ("target-select", "value"), ("current-target", "data"),
    ("tune-job", "data"), ("stage-select", "value"), ("stage-kernel", "value"),
    ("hardware-roof-select", "value"), ("guide-targets", "value"), ("guide-families", "value"),
    ("import-profile", "value"), ("compare-a", "value"), ("compare-b", "value"),
    ("filter-op", "value"), ("filter-target", "value"), ("export-format", "value"),
    ("topology-select", "value"), ("comm-custom", "data"), ("debug-trace", "data"),
    ("profile-current", "data"), ("speedscope-import", "data"), ("studio-state", "data"),
    ("studio-init", "data"), ("op-loaded", "data"), ("tune-best", "data"),
    ("backend-select", "value"), ("diff-backend", "value"), ("ktrain-backend", "value"),
    ("ktrain-optimizer", "value"), ("debug-launch", "value"), ("debug-tensor", "value"),
    ("flame-function", "value"), ("_pages_location", "pathname"), ("_pages_location", "search"),
    ("guide-cases", "data"), ("guide-measured", "data"), ("comm-state", "data"),
    ("runs-table", "selectedRows"), ("guide-table", "selectedRows"),
    ("hardware-table", "cellClicked"),
}
# Values that name nothing (numbers, flags, free text parsed as values, clicks, choices whose
# handlers map them through a fixed dict).
VALUE_PROPS = {"n_clicks", "n_intervals", "clickData", "selected_rows", "active_cell",
               "derived_viewport_data", "style", "contents", "filename", "id"}


@pytest.fixture(scope="module")
def canary(tmp_path_factory) -> Path:
    """A private folder (0700) holding a readable ODL op and JSON files with the secret."""
    folder = tmp_path_factory.mktemp("canary")
    folder.chmod(0o700)
    odl = f"# {SECRET}\nop leak(X: f32[N]) -> Y: f32[N]:\n    Y[i] = X[i] * 2.0\n"
    for name in ("secret.odl", "secret"):
        (folder / name).write_text(odl)
    for name in ("secret.json", "secret.toml", "secret.npz"):
        (folder / name).write_text(json.dumps({"note": SECRET, "nodes": [], "outputs": []}))
    for stem in ("secret",):  # a trace's two files, as a trace id could name them
        (folder / f"{stem}_trace.json").write_text(json.dumps({"format": SECRET}))
    return folder / "secret"


def path_variants(canary: Path) -> list[str]:
    """Absolute, `../` (from the library, the working folder and the cache) and suffixed."""
    from uol_core.ops import library_dir

    absolute = str(canary)
    ups = "../" * 12
    return [absolute, ups + absolute.lstrip("/"), absolute + ".odl", absolute + ".json",
            os.path.relpath(absolute, library_dir()), os.path.relpath(absolute),
            os.path.relpath(absolute, os.environ.get("UOL_CACHE_DIR", "/")),
            "run:../../" + absolute.lstrip("/")]


def value_variants(default, paths: list[str]) -> list:
    """Each path as the bare value; the store's own object with each string (or id) field set to
    the first two (absolute and `../`), and an object naming the path under every usual key."""
    out: list = list(paths)
    for path in paths[:2]:
        if isinstance(default, dict):
            for key, val in default.items():
                if isinstance(val, str | int) or val is None:
                    out.append({**default, key: path})
        out.append({"id": path, "name": path, "kind": "sample", "op": path, "path": path,
                    "odl": path, "target": path, "file": path})
    return out


OPENED: list[str] = []
_WATCH: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if _WATCH and event in ("open", "os.listdir", "os.scandir", "pathlib.Path.glob") and args:
        name = args[0]
        if isinstance(name, str | bytes | os.PathLike) and _WATCH[0] in os.fsdecode(name):
            OPENED.append(f"{event} {os.fsdecode(name)}")


sys.addaudithook(_audit)  # records only while _WATCH names the canary's folder


def _layout_values(base: str) -> dict[tuple[str, str], object]:
    """Every component property the pages' layouts set: the values a fresh page posts."""
    import dash

    found: dict[tuple[str, str], object] = {}

    def walk(node) -> None:
        if isinstance(node, list | tuple):
            for kid in node:
                walk(kid)
            return
        if not hasattr(node, "to_plotly_json"):
            return
        cid = getattr(node, "id", None)
        if isinstance(cid, str):
            for prop in node._prop_names:
                if getattr(node, prop, None) is not None:
                    found[(cid, prop)] = getattr(node, prop)
        walk(getattr(node, "children", None))

    for page in dash.page_registry.values():
        layout = page["layout"]
        with contextlib.suppress(Exception):  # a layout that needs a query: defaults unset
            walk(layout() if callable(layout) else layout)
    return found


def _callbacks(base: str) -> list[dict]:
    deps = requests.get(f"{base}/_dash-dependencies", headers=auth_headers(base), timeout=60)
    assert deps.status_code == 200
    return [d for d in deps.json() if not d.get("clientside_function")]


def _fields(dep: dict) -> list[tuple[str, str]]:
    return [(i["id"], i["property"]) for i in dep["inputs"] + dep.get("state", [])]


def _outputs(dep: dict):
    text = dep["output"]
    parts = text[2:-2].split("...") if text.startswith("..") else [text]
    outs = [{"id": p.rsplit(".", 1)[0], "property": p.rsplit(".", 1)[1].split("@")[0]}
            for p in parts]
    return outs if text.startswith("..") else outs[0]


def _post(base: str, dep: dict, values: dict, changed: tuple[str, str]) -> str:
    """Post one callback as the renderer would; follow a background job to its answer."""
    def entry(item):
        return {"id": item["id"], "property": item["property"],
                "value": values.get((item["id"], item["property"]))}

    body = {"output": dep["output"], "outputs": _outputs(dep),
            "inputs": [entry(i) for i in dep["inputs"]],
            "state": [entry(s) for s in dep.get("state", [])],
            "changedPropIds": [f"{changed[0]}.{changed[1]}"]}
    url = f"{base}/_dash-update-component"
    resp = requests.post(url, json=body, headers=auth_headers(base), timeout=180)
    text = resp.text
    deadline = time.monotonic() + 120
    while resp.status_code == 200 and '"cacheKey"' in text and time.monotonic() < deadline:
        job = resp.json()
        time.sleep(0.3)
        resp = requests.post(url, params={"cacheKey": job["cacheKey"], "job": job["job"]},
                             json=body, headers=auth_headers(base), timeout=180)
        text = resp.text if resp.status_code != 204 else text
        if resp.status_code == 204:
            resp = requests.Response()
            resp.status_code = 200
            resp._content = json.dumps(job).encode()
    assert resp.status_code in (200, 204), f"{dep['output']}: HTTP {resp.status_code}"
    return text


def test_every_callback_input_is_classified(ide):
    """Each input of every callback is either a name field (replayed below) or a plain value."""
    unknown = sorted({f for dep in _callbacks(ide) for f in _fields(dep)
                      if f not in NAME_FIELDS and f[1] not in VALUE_PROPS
                      and not f[0].startswith("{")}
                     - {("odl-editor", "value"), ("sizes-input", "value"),
                        ("debug-sizes", "value"), ("profile-sizes", "value"),
                        ("debug-kernel-text", "value"), ("debug-function", "value"),
                        ("debug-grid", "value"), ("debug-args", "value"),
                        ("debug-mode", "value"), ("debug-program", "value"),
                        ("diff-config", "value"), ("tune-budget", "value"),
                        ("size-input", "value"), ("nodes-input", "value"),
                        ("oversub-input", "value"), ("train-steps", "value"),
                        ("train-stages", "value"), ("train-microbatches", "value"),
                        ("train-straggler", "value"), ("train-schedule", "value"),
                        ("ktrain-steps", "value"), ("guide-measure-limit", "value"),
                        ("guide-bound", "value"), ("graph-kind", "value"),
                        ("graph-zoo-size", "value"), ("graph-zoo-batch", "value"),
                        ("graph-peers", "value"),
                        ("flame-search", "value"), ("flame-source", "value"),
                        ("flame-view", "value"), ("hardware-roof-dtype", "value"),
                        ("filter-backend", "value"), ("filter-ok", "value"),
                        ("codec-select", "value"), ("algorithm-select", "value"),
                        ("collective-select", "value"), ("link-select", "value"),
                        ("overlap-kind", "value"), ("odl-signature", "data"),
                        ("asm-html", "data"), ("kernel-html", "data"), ("diff-html", "data"),
                        ("debug-source-html", "data"), ("line-hotspots-html", "data"),
                        ("odl-hotspots-html", "data"), ("graph-report", "data"),
                        ("graph-structure", "data"), ("_pages_store", "data"),
                        ("stage-binary", "value"), ("stage-select", "options"),
                        ("guide-meta", "data")})
    assert not unknown, f"classify these callback inputs (NAME_FIELDS or a plain value): {unknown}"


def test_no_callback_opens_or_returns_a_path_a_client_sent(ide, canary, capfd, caplog):
    from app.services import history

    caplog.set_level("INFO")
    defaults = _layout_values(ide)
    replayed = 0
    _WATCH.append(str(canary.parent))
    try:
        for dep in _callbacks(ide):
            named = [f for f in _fields(dep) if f in NAME_FIELDS]
            for field in named:
                for value in value_variants(defaults.get(field), path_variants(canary)):
                    answer = _post(ide, dep, {**defaults, field: value}, field)
                    replayed += 1
                    assert SECRET not in answer, f"{dep['output']} <- {field}={value!r}"
    finally:
        _WATCH.clear()
    assert replayed > 500  # every name field of every callback, each variant
    assert not OPENED, f"the server touched the canary: {OPENED[:5]}"
    stored = json.dumps(history.runs(limit=10_000), default=str)
    assert SECRET not in stored
    assert SECRET not in caplog.text  # the server's log records (werkzeug, Dash, ours)
    out, err = capfd.readouterr()
    assert SECRET not in out and SECRET not in err  # the server's log, the children's output
    cache = Path(os.environ["UOL_CACHE_DIR"])
    for file in cache.rglob("*"):
        if file.is_file() and file.stat().st_size < 64 << 20:
            assert SECRET.encode() not in file.read_bytes(), f"the canary reached {file}"
