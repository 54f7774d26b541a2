"""Fuzzing the parser: any text gives IR or an OdlError, never another exception, quickly."""

import time

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
