"""What a sandboxed run sends back is data from an untrusted process (issue 47, item 2): its
output is capped, its result comes from a channel of its own and is validated, its files are
copied back only when regular and small, and a trace's arrays are checked before inflating."""

from __future__ import annotations

import importlib.util
import json
import threading
import time
import tracemalloc
import zipfile
from pathlib import Path

import numpy as np
import pytest

from uol_core.debug.trace_io import load_trace, save_trace
from uol_core.runtime.sandbox import Limits, run_sandboxed

REPO = Path(__file__).resolve().parents[1]
TESTS = Path(__file__).resolve().parent
FAST = Limits(cpu_s=30, memory_mb=512, file_mb=64, processes=16, wall_s=60)
BOMB_LANES = 1 << 25  # 320 MiB inflated: twice the lanes the Debugger loads
needs_triton = pytest.mark.skipif(importlib.util.find_spec("triton") is None,
                                  reason="triton is not installed")


@pytest.fixture(autouse=True)
def private_jobs(tmp_path, monkeypatch):
    monkeypatch.setenv("UOL_JOB_DIR", str(tmp_path / "jobs"))
    monkeypatch.setenv("UOL_CACHE_DIR", str(tmp_path / "cache"))


def payload(do: str, limits: Limits = FAST, keep: dict | None = None, **request) -> dict:
    """Run one of tests/sandbox_payloads.py's attackers in the real sandbox."""
    return run_sandboxed("sandbox_payloads", {"do": do, **request}, "@@PAYLOAD@@",
                         limits=limits, env={"PYTHONPATH": f"{REPO}:{TESTS}"}, keep=keep)


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"no {field} in /proc/self/status")


def test_a_flood_of_output_does_not_grow_the_server():
    """64 MiB on stdout and on stderr: the server keeps 1 MiB of each, reads and drops the
    rest. The peak resident size (VmHWM, reset first) must not move by more than a few MiB."""
    try:
        Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    except OSError as exc:
        pytest.skip(f"cannot reset the peak resident size here: {exc}")
    before = _status_kib("VmRSS")
    res = payload("flood", mib=64)
    grown_mib = (_status_kib("VmHWM") - before) / 1024
    assert res["ok"], res.get("error")
    assert res["sandbox"]["output_dropped"] >= 2 * (63 << 20)
    assert grown_mib < 24, f"the server's resident size grew by {grown_mib:.0f} MiB"


def test_a_result_line_printed_on_stdout_is_not_a_result():
    """The issue's forgery: print a result line in the old format, then leave."""
    res = payload("forge", exit=True)
    assert res["ok"] is False and "forged" not in res
    assert "no result" in res["error"] and "\n" not in res["error"]


def test_a_printed_result_line_does_not_replace_the_real_one():
    res = payload("forge", exit=False)
    assert res["ok"] is True and res["forged"] is False


def test_a_second_result_on_the_channel_is_refused():
    """Code in the sandbox can write to the channel too; two results mean none is accepted."""
    res = payload("forge_on_channel")
    assert res["ok"] is False
    assert "2 results where one is expected" in res["error"]


def test_a_result_of_the_wrong_shape_is_refused():
    from uol_core.runtime import sandbox_io

    channel = sandbox_io.ChannelReader()
    channel.feed(b'{"kind": "isolation", "value": ["x"]}\n'
                 b'{"kind": "result", "value": {"ok": true, "summary": {"events": "many"}}}\n')
    result, why = sandbox_io.accept_result(channel, {"ok": bool, "summary": {"events": int}})
    assert result is None and "result.summary.events is str, not int" in why
    bad_ok = sandbox_io.ChannelReader()
    bad_ok.feed(b'{"kind": "result", "value": {"ok": "yes"}}\n')
    assert sandbox_io.accept_result(bad_ok, None)[0] is None


def test_the_channel_is_capped():
    from uol_core.runtime import sandbox_io

    channel = sandbox_io.ChannelReader()
    line = json.dumps({"kind": "refused", "value": "x" * (1 << 20)}).encode() + b"\n"
    for _ in range(10):
        channel.feed(line)
    assert channel.overflow and len(channel.messages) < 9
    assert "more than 8 MiB" in sandbox_io.accept_result(channel, None)[1]


def test_a_fifo_named_like_a_kept_file_does_not_block_the_copy_back(tmp_path):
    """A FIFO named trace.json blocked the copy-back forever (holding a job slot)."""
    dest = tmp_path / "out"
    done: dict = {}
    keep = {"trace.json": dest / "t.json", "trace.npz": dest / "t.npz"}
    worker = threading.Thread(target=lambda: done.update(payload("fifo", keep=keep)),
                              daemon=True)
    start = time.monotonic()
    worker.start()
    worker.join(30)
    assert not worker.is_alive(), "the copy-back blocked on the FIFO"
    assert time.monotonic() - start < 30
    assert done["ok"] is True
    assert not (dest / "t.json").exists() and (dest / "t.npz").read_bytes() == b"not an archive"
    assert any("trace.json" in note and "not a regular file" in note
               for note in done["sandbox"]["not_copied"])


def test_copy_back_never_follows_a_link_nor_copies_more_than_the_cap(tmp_path):
    from uol_core.runtime import sandbox_io

    private, dest = tmp_path / "private", tmp_path / "dest"
    private.mkdir()
    (tmp_path / "secret").write_text("secret")
    (private / "link.json").symlink_to(tmp_path / "secret")
    (private / "big.npz").write_bytes(b"0" * 2048)
    (private / "ok.json").write_text("{}")
    notes = sandbox_io.copy_back(private, {"link.json": dest / "a", "big.npz": dest / "b",
                                           "ok.json": dest / "c", "../secret": dest / "d"}, 1024)
    assert not (dest / "a").exists() and not (dest / "b").exists() and not (dest / "d").exists()
    assert (dest / "c").read_text() == "{}"
    assert len(notes) == 3


# ------------------------------------------------------------------ a trace's arrays


def _small_trace(tmp_path: Path) -> Path:
    from uol_core.debug.recorder import Launch, MemEvent, TensorInfo, Trace

    trace = Trace(sources={"k.py": "x = tl.load(p)\n"}, notes=[])
    trace.launches.append(Launch("k", "k.py", (1, 1, 1),
                                 {"x": TensorInfo("x", (8,), "float32", 4)}, [(0, 0, 0)]))
    for _ in range(10):
        trace.events.append(MemEvent("load", 0, (0, 0, 0), "x", 1,
                                     np.arange(8, dtype=np.int64), np.ones(8, bool),
                                     np.zeros(8, bool), 4, {}))
    json_path, _ = save_trace(trace, tmp_path / "t")
    return json_path


def _npy_header(dtype: str, count: int) -> bytes:
    import io

    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": dtype, "fortran_order": False,
                                               "shape": (count,)})
    return out.getvalue()


def _write_bomb(npz: Path, header_lanes: int, data_lanes: int) -> None:
    """An npz whose members inflate to `data_lanes` lanes (zeros: a few MB compressed)."""
    zeros = bytes(1 << 20)
    with zipfile.ZipFile(npz, "w", zipfile.ZIP_DEFLATED, compresslevel=1) as archive:
        for name, dtype, size in (("offsets", "<i8", 8), ("mask", "|b1", 1), ("oob", "|b1", 1)):
            with archive.open(f"{name}.npy", "w", force_zip64=True) as member:
                member.write(_npy_header(dtype, header_lanes))
                left = data_lanes * size
                while left > 0:
                    member.write(zeros[:min(left, len(zeros))])
                    left -= len(zeros)


@pytest.mark.parametrize("case", ["json lists few lanes", "json agrees with the bomb",
                                  "header lies about its size"])
def test_a_trace_npz_bomb_is_refused_before_inflating(tmp_path, case):
    """32 Mi lanes (320 MiB inflated, a few MB on disk): refused with one line, and loading
    never holds more than a few MiB (tracemalloc sees numpy's buffers)."""
    json_path = _small_trace(tmp_path)
    bomb = BOMB_LANES
    if case == "json agrees with the bomb":
        meta = json.loads(json_path.read_text())
        meta["events"][0]["lanes"] = bomb - 72
        json_path.write_text(json.dumps(meta))
    _write_bomb(json_path.with_suffix(".npz"), 80 if case.startswith("header") else bomb, bomb)
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as refused:
            load_trace(json_path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert "\n" not in str(refused.value)
    assert peak < 16 << 20, f"loading held {peak >> 20} MiB before refusing"


def test_a_fifo_in_place_of_a_trace_file_does_not_block_the_loader(tmp_path):
    import os

    json_path = _small_trace(tmp_path)
    json_path.unlink()
    os.mkfifo(json_path)
    outcome: list = []

    def load() -> None:
        try:
            load_trace(json_path)
        except ValueError as exc:
            outcome.append(str(exc))

    reader = threading.Thread(target=load, daemon=True)
    reader.start()
    reader.join(10)
    assert not reader.is_alive(), "the loader blocked on a FIFO"
    assert outcome and "not a regular file" in outcome[0]


# ------------------------------------------------------------------ through the Debugger


@needs_triton
def test_the_debuggers_forged_trace_line_is_ignored():
    """The issue's reproducer: the user's kernel prints a @@TRACE@@ line and leaves."""
    from app.services import debugging

    forged = {"ok": True, "summary": {"launches": [], "events": 0, "bytes_loaded": 0,
                                      "bytes_stored": 0, "findings": [], "mask_ratios": [],
                                      "notes": ["forged"]}}
    source = (f"import json, os\nprint('\\n@@TRACE@@' + json.dumps({forged!r}), flush=True)\n"
              f"os._exit(0)\n" + debugging.EXAMPLE_KERNEL)
    res = debugging.trace_user_kernel(source, **debugging.EXAMPLE_CALL)
    assert res["ok"] is False and "no result" in res["error"]


@needs_triton
def test_a_fifo_trace_does_not_hold_the_job_slot(tmp_path):
    """User code that leaves a FIFO where the trace goes: the trace returns within seconds and
    another client gets a worker slot within a second."""
    from app.services import debugging
    from app.services.job_queue import job_slot

    source = ("import os, threading, time\n"
              "def swap():  # once the trace is saved, trace.json becomes a FIFO\n"
              "    while not os.path.exists('trace.npz'):\n        time.sleep(0.01)\n"
              "    os.unlink('trace.json')\n    os.mkfifo('trace.json')\n"
              "threading.Thread(target=swap).start()\n" + debugging.EXAMPLE_KERNEL)
    done: dict = {}
    worker = threading.Thread(target=lambda: done.update(debugging.trace_user_kernel(
        source, **debugging.EXAMPLE_CALL, client="fifo")), daemon=True)
    worker.start()
    worker.join(90)
    assert not worker.is_alive(), "the trace's copy-back blocked on a FIFO"
    assert done["ok"] is True, done  # the run itself succeeded; the FIFO was not taken
    assert any("trace.json" in note for note in done["sandbox"]["not_copied"])
    start = time.monotonic()
    with job_slot("another client", "probe"):
        assert time.monotonic() - start < 1.0
