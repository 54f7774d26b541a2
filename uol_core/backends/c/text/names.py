"""The one source of C identifiers for IR names: tensors, indices, sizes, strides, local copies.

Every identifier is `<kind>[<number>]_<IR name>`, with a kind letter per role (t tensor, i index,
D size, s stride, r restrict copy, h halo copy, v hoisted invariant read, f a fused statement's value,
e a split reduction's stretch offset). IR names are ODL identifiers, which never start
with a digit, so the part before the first underscore (kind and number) is read back
unambiguously and no two (kind, number, name) triples share a C identifier: a gradient named
`g_r` and the restrict copy of a tensor `g` are `t_g_r` and `r_g`. Template locals (acc, c0_1,
xr, ...) never have the shape <kind letter>[digits]_<name> with these kind letters.
"""

from __future__ import annotations

# role -> kind letter; one letter per role, none a prefix of another
KINDS: dict[str, str] = {"tensor": "t", "index": "i", "size": "D", "stride": "s",
                         "region": "r", "halo": "h", "invariant": "v", "fused": "f",
                         "stretch": "e"}


def c_name(role: str, name: str, number: int | None = None) -> str:
    """C identifier of IR name `name` in `role` (see KINDS), with an optional ordinal."""
    return f"{KINDS[role]}{'' if number is None else int(number)}_{name}"


def tensor_id(name: str) -> str:
    """C identifier of an IR tensor."""
    return c_name("tensor", name)


def index_id(name: str) -> str:
    """C identifier of an IR index variable."""
    return c_name("index", name)


def stretch_id(name: str) -> str:
    """C identifier of the offset into a split reduction's stretches over IR index `name`."""
    return c_name("stretch", name)


def size_id(name: str) -> str:
    """C identifier of an IR dimension symbol (a compile-time constant)."""
    return c_name("size", name)


def stride_id(tensor: str, axis: int) -> str:
    """C identifier of tensor `tensor`'s stride along `axis` (a kernel argument)."""
    return c_name("stride", tensor, axis)


def region_id(tensor: str) -> str:
    """C identifier of a restrict-qualified copy of a tensor's pointer inside a parallel region."""
    return c_name("region", tensor)


def halo_id(tensor: str, ordinal: int) -> str:
    """C identifier of the `ordinal`-th padded (halo) copy of a tensor."""
    return c_name("halo", tensor, ordinal)


def invariant_id(tensor: str, ordinal: int) -> str:
    """C identifier of the `ordinal`-th loop-invariant element of `tensor` read before a loop."""
    return c_name("invariant", tensor, ordinal)


def fused_id(tensor: str) -> str:
    """C identifier of a fused statement's value, kept in a register instead of `tensor`."""
    return c_name("fused", tensor)
