"""The generic C path's row loops: column riders sharing a row statement's loop, and rows
streamed out with non-temporal stores when the kernel moves more than the last-level cache."""

from __future__ import annotations

import dataclasses

import pytest

from tests.test_c_patterns import TARGET, check
from uol_core.acg.fixtures import fixed_target
from uol_core.acg.stores import store_policy
from uol_core.backends.c.loops import generic as c_generic
from uol_core.odl import parse
from uol_core.odl.grad import derive_grad
from uol_core.ops import load_op

MIB = 1 << 20


def test_store_policy_streams_only_in_place_outputs_past_the_last_level_cache():
    target = fixed_target()  # 32 MiB L3
    big = store_policy("Y", 32 * MIB, 32 * MIB, target, fresh=False)
    assert big.stream
    assert big.why == ("non-temporal stores: Y (32 MiB) and the kernel's inputs (32 MiB) exceed "
                       "the last-level cache (32 MiB)")
    fresh = store_policy("Y", 32 * MIB, 32 * MIB, target)  # a fresh output: zeroed in the cache
    assert not fresh.stream and "a fresh Y's pages are zeroed through the cache" in fresh.why
    small = store_policy("Y", 8 * MIB, 8 * MIB, target, fresh=False)
    assert not small.stream and "fit in the last-level cache (32 MiB)" in small.why
    no_l3 = dataclasses.replace(target, l3_bytes=None)  # the L2 is the last level then
    assert store_policy("Y", 600 << 10, 600 << 10, no_l3, fresh=False).stream
    bare = dataclasses.replace(target, l3_bytes=None, l2_bytes=None)
    assert not store_policy("Y", 64 * MIB, 64 * MIB, bare, fresh=False).stream


def test_layernorm_rows_stream_when_asked_and_say_why_not_otherwise():
    op = load_op("layernorm")
    sizes = {"R": 64, "C": 256}  # X and Y 64 KiB each
    small_cache = dataclasses.replace(TARGET, l3_bytes=96 << 10)
    auto = c_generic.emit(op, sizes, small_cache, {"threads": 2}).text
    assert "uol_stream_row" not in auto and "stage" not in auto
    assert ("row loop of Y (line 5): ordinary stores: Y (64 KiB) and the kernel's inputs "
            "(66 KiB) exceed the last-level cache (96 KiB), but a fresh Y's pages are zeroed"
            in auto)
    streamed = c_generic.emit(op, sizes, small_cache, {"threads": 2, "stream": 1}).text
    assert "row loop of Y (line 5): non-temporal stores (the config's choice" in streamed
    assert "uol_stream_row(&r_Y[i_r * 256 + 0], stage, 256);" in streamed
    assert "_mm256_stream_ps" in streamed and "_mm_sfence();" in streamed
    off = c_generic.emit(op, sizes, small_cache, {"threads": 2, "stream": 0}).text
    assert off == auto


@pytest.mark.parametrize("sizes", [{"R": 9, "C": 37}, {"R": 16, "C": 64}, {"R": 3, "C": 5}])
@pytest.mark.parametrize("threads", [1, 2, 3])
def test_streamed_rows_verify_at_any_alignment(sizes, threads):
    """Rows of 37 floats start at every offset from a vector boundary: the head before the
    first aligned vector and the tail after the last whole one take ordinary stores."""
    kernel = check(load_op("layernorm"), sizes, {"generic": 1, "threads": threads, "stream": 1})
    assert "uol_stream_row" in kernel.src.text
    backward = check(derive_grad(load_op("layernorm")).op, sizes,
                     {"generic": 1, "threads": threads, "stream": 1})
    assert "uol_stream_row(&r_dX[" in backward.src.text


def test_riders_share_the_row_loop_and_read_each_row_once():
    op = derive_grad(load_op("layernorm")).op
    kernel = check(op, {"R": 17, "C": 31}, {"generic": 1, "threads": 2})
    text = kernel.src.text
    assert ("row loop of dX (line 5): dgamma, dbeta add their rows' shares in its column loop"
            in text)
    assert "#pragma omp simd\n                for (int64_t i_gamma0" not in text
    assert text.count("this row's share */ const int64_t") == 2
    # the rider's row reads stay out of the loop (inside, gcc leaves the loop scalar)
    assert "const float v4_mu = r_mu[(i_r)];" in text


def test_a_rider_reading_the_row_statement_keeps_its_own_loop():
    """S sums Y, which the row statement writes: Y stays in memory for S (no streaming: S
    would read it back from memory at once) and S keeps its own loop, and so does T after it.
    Without S, T shares Y's loop and Y streams."""
    head = "op rowsum(X: f32[R, C]) -> (Y: f32[R, C], S: f32[C], T: f32[C]):\n"
    y = "    Y[r, c] = X[r, c] * 2.0 + 1.0\n"
    s, t = "    S[c] = sum[r](Y[r, c])\n", "    T[c] = sum[r](X[r, c])\n"
    config = {"generic": 1, "threads": 2, "stream": 1}
    kernel = check(parse(head + y + s + t), {"R": 13, "C": 21}, config)
    assert "rides the pass of Y" in kernel.src.meta["fusion"]
    assert "S[c], this row's share */\n" in kernel.src.text  # its own loop
    assert "row loop of" not in kernel.src.text
    shared = check(parse(head.replace(", S: f32[C]", "") + y + t), {"R": 13, "C": 21}, config)
    assert ("row loop of Y (line 2): T add their rows' shares in its column loop (each row read "
            "once); non-temporal stores (the config's choice: an output written in place)") \
        in shared.src.text


def test_streamed_layernorm_golden(golden):
    text = c_generic.emit(load_op("layernorm"), {"R": 8, "C": 64}, TARGET,
                          {"threads": 2, "stream": 1}).text
    golden("c/pattern_generic_layernorm_streamed.c", text)
