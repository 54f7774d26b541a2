"""One mangler names every C identifier: no two IR names (in any role) share one, and kernels
whose tensor names look like another tensor's derived names build and verify."""

from __future__ import annotations

import string

import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_c_patterns import check  # tests/ is on sys.path (pytest prepend mode)

from uol_core import to_torch
from uol_core.backends.c.text.names import KINDS, c_name
from uol_core.odl import parse

# ODL identifiers: a letter or underscore, then letters, digits and underscores
IDENT = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,6}", fullmatch=True)
ROLE = st.sampled_from(sorted(KINDS))
NUMBER = st.one_of(st.none(), st.integers(min_value=0, max_value=120))


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(ROLE, IDENT, NUMBER), min_size=2, max_size=12, unique=True))
def test_distinct_names_get_distinct_identifiers(entries):
    names = [c_name(role, name, number) for role, name, number in entries]
    assert len(set(names)) == len(names), entries
    for text in names:  # every identifier is valid C and starts with its kind letter
        assert text[0] in string.ascii_letters and all(ch.isalnum() or ch == "_" for ch in text)


def test_kind_letters_are_distinct():
    assert len(set(KINDS.values())) == len(KINDS)


def test_a_tensor_named_like_another_tensors_region_copy_builds():
    """`g_r` and the restrict copy of `g` inside the row pass once both became `t_g_r`."""
    op = parse("op scaled(X: f32[R, C], g: f32[C]) -> g_r: f32[R, C]:\n"
               "    mu[r] = mean[c](X[r, c])\n"
               "    g_r[r, c] = (X[r, c] - mu[r]) * g[c]\n")
    check(op, {"R": 7, "C": 33})


def test_rmsnorm_with_intermediate_r_and_weight_g_trains():
    """The derived backward of an RMSNorm whose intermediate is `r` and weight `g` names the
    gradient of r `g_r`: its kernels must build beside the weight's own identifiers."""
    fn = to_torch("op rms(X: f32[R, C], g: f32[C]) -> Y: f32[R, C]:\n"
                  "    r[i] = rsqrt(mean[c](X[i, c] * X[i, c]) + 1e-6)\n"
                  "    Y[i, c] = X[i, c] * r[i] * g[c]\n")
    torch.manual_seed(0)
    x = torch.randn(6, 40, dtype=torch.float32, requires_grad=True)
    g = torch.randn(40, dtype=torch.float32, requires_grad=True)
    fn(x, g).square().sum().backward()
    x2, g2 = x.detach().clone().requires_grad_(), g.detach().clone().requires_grad_()
    ref = x2 * torch.rsqrt(x2.square().mean(-1, keepdim=True) + 1e-6) * g2
    ref.square().sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(g.grad, g2.grad, rtol=1e-4, atol=1e-4)
