"""Fuzzing the parser: any text gives IR or an OdlError, never another exception, quickly."""

import sys
import time
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uol_core.odl import OdlError, parse
from uol_core.odl.printer import format_op
from uol_core.ops import list_ops, op_text

LIBRARY = [op_text(name) for name in list_ops()]
ALPHABET = "abcXYZMNK_0123456789 \n\t()[]:,+-*/<>=!.#eo" + "pfsumax"
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parse_or_odl_error(text: str) -> None:
    start = time.perf_counter()
    try:
        op = parse(text)
    except OdlError as err:
        assert err.line >= 0 and err.column >= 0 and err.message
    else:
        assert parse(format_op(op)) == op  # what parses, prints back to the same IR
    assert time.perf_counter() - start < 2.0


@FUZZ
@given(st.text(alphabet=ALPHABET, max_size=200))
def test_random_text(text):
    parse_or_odl_error(text)


@FUZZ
@given(st.sampled_from(LIBRARY), st.data())
def test_mutated_library_ops(source, data):
    """Delete, duplicate or replace a slice of a real operator."""
    n = len(source)
    i = data.draw(st.integers(0, n))
    j = data.draw(st.integers(i, min(n, i + 12)))
    kind = data.draw(st.sampled_from(["delete", "duplicate", "replace"]))
    if kind == "delete":
        text = source[:i] + source[j:]
    elif kind == "duplicate":
        text = source[:j] + source[i:j] + source[j:]
    else:
        text = source[:i] + data.draw(st.text(alphabet=ALPHABET, max_size=6)) + source[j:]
    parse_or_odl_error(text)


def test_every_library_op_round_trips_through_the_printer():
    for source in LIBRARY:
        op = parse(source)
        assert parse(format_op(op)) == op


def _mutation_fuzzer():
    """benchmarks/odl_fuzz.py: the mutation engine the 50,000-text run uses."""
    bench = str(Path(__file__).resolve().parents[1] / "benchmarks")
    if bench not in sys.path:
        sys.path.insert(0, bench)
    import odl_fuzz
    return odl_fuzz


def test_mutated_texts_through_every_stage_raise_only_odl_or_shape_errors():
    """2,000 mutated texts (the full run: `benchmarks/odl_fuzz.py --count 50000`): parsed,
    printed back, sizes bound, C emitted, reference evaluated; one in 200 kernels built and
    verified in a child process."""
    report = _mutation_fuzzer().run(2000, seed=11, compile_every=200)
    assert not report.failures, report.failures[0]
    assert report.outcomes["kernel"] + report.outcomes["built"] > 300  # deep stages reached
    assert report.outcomes["built"] >= 1 and report.outcomes["odl-error"] > 300
    assert report.outcomes["overflow-error"] >= 5  # large coefficients reach the int64 check


def test_the_mutation_engine_reaches_the_hard_cases():
    fuzz = _mutation_fuzzer()
    texts = list(fuzz.mutants(3000, seed=2))
    assert len(set(texts)) > 2500
    for needle in ("18446744073709551621", "pad(", "²", "\x00", " - 999", "i8[",
                   "4611686018427387904 * ", "-4611686018427387904", "9223372036854775807",
                   "2147483648 * "):
        assert any(needle in t for t in texts), needle
    signatures = [t.split("->")[0] for t in texts if "->" in t]
    assert any(" + 999]" in s or " + 3," in s for s in signatures)  # a wider input
    assert any(":" in t[t.find("sum["):t.find("](", t.find("sum["))] for t in texts
               if "sum[" in t)  # a written reduction extent
