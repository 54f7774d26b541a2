"""Studio inspection services: the assembly listing tied to C and ODL lines, the side-by-side
kernel diff, Triton knobs that change nothing, the tune's measured baseline, speedscope import."""

from __future__ import annotations

import base64
import json

import pytest

from app.callbacks.studio_inspect import parse_knobs
from app.components.inspect_view import asm_html, diff_html, diff_rows
from app.services.assembly import AsmListing, disassemble, parse_objdump
from uol_core.ops import op_text

OBJDUMP = """
kernel.o:     file format elf64-x86-64

Disassembly of section .text:

0000000000000000 <uol_softmax._omp_fn.0>:
uol_softmax._omp_fn.0():
/somewhere/kernel.c:82
   0:	push   rbp
/somewhere/kernel.c:84
   1:	mov    esi,0x400
  20:	call   25 <uol_softmax._omp_fn.0+0x25>
			21: R_X86_64_PLT32	aligned_alloc-0x4
_mm512_add_epi32():
/usr/lib/gcc/x86_64-linux-gnu/12/include/avx512fintrin.h:886
  67:	vpaddd zmm0,zmm1,zmm2        # 76 <uol_softmax._omp_fn.0+0x76>
"""


def test_objdump_rows_carry_c_and_odl_lines_and_relocations():
    rows, count = parse_objdump(OBJDUMP, {82: 3, 84: 4})
    assert count == 4
    assert rows[0].function and rows[0].text == "uol_softmax._omp_fn.0:"
    push, mov, call, add = rows[1:]
    assert (push.c_line, push.odl_line) == (82, 3)
    assert (mov.c_line, mov.odl_line) == (84, 4)
    assert call.text.endswith("# aligned_alloc-0x4")  # the relocation names the callee
    # an inlined intrinsic stays with the kernel line that called it, its header noted
    assert (add.c_line, add.inlined_from) == (84, "avx512fintrin.h:886")
    assert add.text == "vpaddd zmm0,zmm1,zmm2"  # objdump's own comment dropped


def test_listing_is_capped_and_says_so():
    body = "0000000000000000 <f>:\n/x/kernel.c:1\n" + "".join(
        f"  {i:x}:\tnop\n" for i in range(50))
    rows, count = parse_objdump(body, {}, limit=10)
    assert count == 50 and sum(not r.function for r in rows) == 10
    listing = AsmListing(True, "gcc", ["-O3"], rows, count)
    assert listing.truncated and "first 10 shown" in listing.summary()


def test_softmax_kernel_disassembles_with_its_flags_and_mapped_rows():
    from app.services import kernels

    odl = op_text("softmax")
    src = kernels.emit(odl, "c", "host", {"R": 64, "C": 64}, {})[2]
    listing = disassemble(src, tuple(kernels._target("host").isa))
    assert listing.ok, listing.error
    assert "-O3" in listing.flags and "-g" in listing.flags and "-shared" not in listing.flags
    assert listing.compiler and listing.instructions > 10
    mapped = [r for r in listing.rows if r.odl_line]
    assert mapped, "no instruction traced back to an ODL line"
    assert {r.odl_line for r in mapped} <= set(src.line_map.values())
    html = asm_html(listing.rows)
    assert 'data-cline="' in html and 'data-odl="' in html


def test_triton_kernels_are_not_disassembled():
    from app.services import kernels

    src = kernels.emit(op_text("softmax"), "triton", "h200-sxm", {"R": 64, "C": 64}, {})[2]
    listing = disassemble(src)
    assert not listing.ok and "C backend" in listing.error


def test_side_by_side_diff_folds_equal_runs_and_escapes():
    before = "\n".join(f"line {i}" for i in range(40))
    after = before.replace("line 20", "line <20>")
    rows, stats = diff_rows(before, after)
    assert stats == {"added": 0, "removed": 0, "changed": 1, "same": 39}
    assert [r[0] for r in rows].count("fold") == 2
    assert ("replace", 21, "line 20", 21, "line <20>") in rows
    table, _ = diff_html(before, after, ("A", "B"))
    assert "line &lt;20&gt;" in table and "<20>" not in table


def test_diff_is_capped():
    table, stats = diff_html("", "\n".join(map(str, range(50))), ("A", "B"), limit=10)
    assert stats["added"] == 50 and "40 more rows not shown" in table


def test_knob_text_is_parsed_or_refused_with_the_form():
    assert parse_knobs(" ku=1, mr=4 ; isa=avx2") == {"ku": 1, "mr": 4, "isa": "avx2"}
    assert parse_knobs("") == {}
    for bad in ("ku", "=3", "ku=", "k u=1"):
        with pytest.raises(ValueError, match="name=value"):
            parse_knobs(bad)


def test_a_diff_against_a_knob_the_kernel_has_not_says_so():
    """A typed knob the space does not offer was dropped, and B came out the same as A."""
    from app.callbacks.studio_inspect import diff_kernels
    from app.services.kernels import compile_odl

    odl, sizes = op_text("layernorm"), {"R": 64, "C": 64}
    a = compile_odl(odl, "c", "host", sizes)
    state = {"ok": True, "odl": odl, "backend": "c", "target": "host", "sizes": sizes,
             "kernel": a.source, "config": a.config}
    _, status = diff_kernels(1, state, "c", "mr=4")  # a GEMM knob
    assert status == "✗ no knob mr for c here; its knobs: threads, chunk, vec, fuse, stream"
    _, status = diff_kernels(1, state, "c", "fuse=0")
    assert status.startswith("A → B: knobs fuse: 1 → 0;")


def test_stream_is_offered_where_it_changes_the_kernel_and_reaches_it():
    """`stream` (non-temporal stores for an output written in place) is a Studio knob of the C
    kernels it changes, left out of tuning; a conv or a GEMM has no such knob."""
    from app.services.kernels import compile_odl

    norm = compile_odl(op_text("layernorm"), "c", "host", {"R": 64, "C": 256})
    row = next(k for k in norm.knobs if k["name"] == "stream")
    assert row["value"] == 0 and [o["value"] for o in row["options"]] == [0, 1]
    assert "uol_stream_row" not in norm.source
    streamed = compile_odl(op_text("layernorm"), "c", "host", {"R": 64, "C": 256}, {"stream": 1})
    assert "uol_stream_row(&r_Y[" in streamed.source
    for name, sizes in (("conv2d_pad1", None), ("matmul", {"M": 64, "N": 64, "K": 64})):
        assert "stream" not in {k["name"] for k in compile_odl(op_text(name), "c", "host",
                                                                sizes).knobs}


def test_triton_row_kernel_does_not_offer_knobs_that_change_nothing():
    from app.services.kernels import compile_odl

    res = compile_odl(op_text("softmax"), "triton", "h200-sxm")
    assert res.ok, res.error
    offered = {k["name"] for k in res.knobs}
    hidden = {h["name"]: h["reason"] for h in res.hidden_knobs}
    # the row kernel sizes its tile from the row (BLOCK_C): its space has no BLOCK to hide
    assert offered == {"num_warps"} and "BLOCK" not in hidden
    assert not offered & set(hidden)
    wide = compile_odl(op_text("softmax"), "triton", "h200-sxm", {"R": 1024, "C": 1024})
    warps = next(k for k in wide.knobs if k["name"] == "num_warps")
    assert [o["value"] for o in warps["options"] if not o["disabled"]] == [1, 2, 4, 8]
    # every knob still offered does change the kernel text
    for knob in res.knobs:
        other = next(o["value"] for o in knob["options"]
                     if o["value"] != knob["value"] and not o["disabled"])
        changed = compile_odl(op_text("softmax"), "triton", "h200-sxm",
                              config={knob["name"]: other})
        assert changed.source != res.source, knob["name"]
    # a GEMM's tiles all matter: nothing hidden there
    assert compile_odl(op_text("matmul"), "triton", "h200-sxm").hidden_knobs == []


def test_tune_summary_states_the_speedup_over_the_measured_default():
    from app.callbacks.studio_run import tune_summary

    trail = [{"i": 1, "config": {"ku": 4}, "gflops": 10.0, "ok": True, "baseline": True},
             {"i": 2, "config": {"ku": 1}, "gflops": 15.0, "ok": True}]
    text = tune_summary(trail, 2, {"config": {"ku": 1}, "gflops": 15.0})
    assert "1.50x the untuned default (10.00 GFLOP/s, measured first)" in text
    text = tune_summary(trail[:1], 1, {"config": {"ku": 4}, "gflops": 10.0})
    assert "untuned default (measured first) stays the best" in text
    # after a confirmation round the speedup is against the default's time in the race
    trail[0]["key"], trail[1]["key"] = "ku=4", "ku=1"
    text = tune_summary(trail, 2, {"config": {"ku": 1}, "gflops": 14.0,
                                   "raced": {"ku=1": 14.0, "ku=4": 12.5}})
    assert "1.12x the untuned default (12.50 GFLOP/s, timed in turn with it)" in text
    assert "the 2 finalists, timed again in turn, settled the pick (14.00, 12.50" in text


def test_the_tuner_measures_the_untuned_default_first():
    from app.callbacks.studio_run import _untuned_default
    from app.services.kernels import default_sizes
    from uol_core import parse
    from uol_core.acg.session import open_session
    from uol_core.acg.space_core import as_mapping

    odl = op_text("softmax")
    state = {"odl": odl, "backend": "c", "target": "host", "sizes": default_sizes(odl)}
    default = _untuned_default(state)
    session = open_session(parse(odl), state["sizes"], "host", replay=True)
    # put the default last in the model's order: put_first must still measure it first
    ranked = session.ranked()
    # (a Studio-only knob, softmax's stream, is not in the tuner's configs: it matches its
    # default by absence)
    def is_default(cfg) -> bool:
        return all(as_mapping(cfg).get(k, v) == v for k, v in default.items())
    session._ranked = [p for p in ranked if not is_default(p[0])] + \
        [p for p in ranked if is_default(p[0])]
    assert session.put_first(default) and is_default(session.ranked()[0][0])
    assert len(session.ranked()) == len(ranked)


def _upload(obj) -> str:
    text = obj if isinstance(obj, str) else json.dumps(obj)
    return "data:application/json;base64," + base64.b64encode(text.encode()).decode()


def test_speedscope_import_reads_a_sampled_file():
    from app.callbacks.profiler_flame import import_speedscope

    doc = {"shared": {"frames": [{"name": "main"}, {"name": "work", "file": "w.c", "line": 3}]},
           "profiles": [{"type": "sampled", "name": "cpu", "unit": "milliseconds",
                         "samples": [[0, 1], [0, 1], [0]], "weights": [2, 3, 5]}]}
    got = import_speedscope(_upload(doc), "p.speedscope.json")
    tree = got["profiles"][0]["tree"]
    assert got["profiles"][0]["name"] == "cpu"
    main = tree["children"][0]
    assert (main["name"], main["total"], main["children"][0]["total"]) == ("main", 10, 5)


@pytest.mark.parametrize("doc, message", [
    ("{not json", "not JSON: line 1, column 2"),
    ({"traceEvents": []}, "shared.frames: missing"),
    ({"shared": {"frames": [{"name": "a"}]}, "profiles": [
        {"type": "sampled", "samples": [[0, 7]]}]}, "profiles[0].samples[0][1]: 7 is not a frame"),
    ({"shared": {"frames": [{"name": "a"}]}, "profiles": [
        {"type": "evented", "events": [{"type": "C", "at": 0, "frame": 0}]}]},
     "profiles[0].events[0]: a close event with no open frame"),
    ({"shared": {"frames": [{"name": "a"}]}, "profiles": [{"type": "evented", "events": [
        {"type": "O", "at": 5, "frame": 0}, {"type": "C", "at": 1, "frame": 0}]}]},
     "events must be in time order"),
    ({"shared": {"frames": []}, "profiles": [{"type": "heap"}]}, "'heap'"),
])
def test_speedscope_import_says_what_is_wrong_and_where(doc, message):
    from app.callbacks.profiler_flame import import_speedscope
    from profilers.speedscope import SpeedscopeError

    with pytest.raises(SpeedscopeError) as err:
        import_speedscope(_upload(doc), "bad.json")
    assert message in str(err.value)


def test_speedscope_import_refuses_big_or_foreign_files():
    from app.callbacks.profiler_flame import import_speedscope
    from app.security import UploadError

    with pytest.raises(UploadError, match="limit of 8192 KiB"):
        import_speedscope(_upload("x" * (9 << 20)), "big.json")
    with pytest.raises(UploadError, match=r"expected \.json"):
        import_speedscope(_upload("{}"), "trace.txt")
