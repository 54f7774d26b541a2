"""Journey (a) below the browser: every library op compiles in the Studio on C for three CPU
targets and on Triton for a GPU, at its default sizes, with every chosen knob value legal. The
browser walks each op too (ui_tests/test_studio_widths.py); this checks all four pairs per op."""

from __future__ import annotations

import pytest

from app.services.kernels import compile_odl, default_sizes
from uol_core import parse
from uol_core.odl.shapes import DEFAULT_ELEMENTS_LIMIT, tensor_elements
from uol_core.ops import list_ops, op_text

COMBOS = [("c", "host"), ("c", "avx2-desktop"), ("c", "xeon-spr-8480"), ("triton", "h200-sxm")]


@pytest.mark.parametrize("name", list_ops())
def test_library_op_compiles_on_every_pair_with_legal_knobs(name):
    text = op_text(name)
    for backend, target in COMBOS:
        result = compile_odl(text, backend, target)
        assert result.ok, (name, backend, target, result.error)
        assert result.source.strip(), (name, backend, target)
        for knob in result.knobs:
            chosen = [o for o in knob["options"] if o["value"] == knob["value"]]
            assert chosen, (name, backend, target, knob["name"], "value not among its options")
            assert not chosen[0]["disabled"], (name, backend, target, knob["name"],
                                               chosen[0]["reason"])
        # Run and Apply send the kernel's recorded config back: every value in it must be legal
        # (a depthwise conv once recorded its derived row block, chunk=28, and Run refused it)
        again = compile_odl(text, backend, target, result.sizes, result.config)
        assert again.ok and again.source == result.source, (name, backend, target, again.error)


@pytest.mark.parametrize("name", ["attention_batched", "permute_0213", "bmm", "matmul"])
def test_default_sizes_fit_the_default_limit(name):
    """4-D and 5-D ops at 256 per dimension needed tens of GB: the Studio said so and showed no
    kernel for a library op a user had just picked."""
    op = parse(op_text(name))
    sizes = default_sizes(op_text(name))
    assert tensor_elements(op, sizes) <= DEFAULT_ELEMENTS_LIMIT, sizes
    if name == "matmul":
        assert set(sizes.values()) == {256}
