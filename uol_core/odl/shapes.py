"""Concrete shapes: bind dimension symbols from tensors or `M=...` specs, check every extent."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence

from uol_core.odl.check import index_range, stmt_extents
from uol_core.odl.errors import ShapeError
from uol_core.odl.ir import Access, Affine, Op, Reduce, walk
from uol_core.odl.overflow import check_index_arithmetic


def parse_shape_spec(spec: str) -> dict[str, int]:
    """Parse 'M=64,N=32' (also 'M=64 N=32') into a dict of sizes."""
    sizes: dict[str, int] = {}
    for part in spec.replace(" ", ",").split(","):
        if not part:
            continue
        if "=" not in part:
            raise ShapeError(f"bad size '{part}': write NAME=VALUE, e.g. M=64,N=32")
        name, value = part.split("=", 1)
        try:
            sizes[name.strip()] = int(value)
        except ValueError:
            raise ShapeError(f"size of '{name}' must be an integer, got '{value}'") from None
    return sizes


def bind_sizes(op: Op, sizes: Mapping[str, object]) -> dict[str, int]:
    """Dimension sizes from a mix of symbol sizes {'M': 64} and input shapes {'A': (64, 32)}."""
    inputs = {d.name: d for d in op.inputs}
    bound: dict[str, int] = {}
    shapes: dict[str, tuple[int, ...]] = {}
    for name, value in sizes.items():
        if name in inputs:
            shape = tuple(getattr(value, "shape", value))  # a tensor or a shape tuple
            _bind_from_shape(op, name, shape, bound)
            shapes[name] = shape
        elif name in op.dims:
            _set(bound, name, int(value), f"size {name}={value}")
        else:
            raise ShapeError(f"'{name}' is neither a dimension ({', '.join(op.dims)}) nor an input "
                             f"({', '.join(inputs)}) of {op.name}")
    _solve_affine_axes(op, shapes, bound)
    missing = [d for d in op.dims if d not in bound]
    if missing:
        raise ShapeError(f"sizes missing for {', '.join(missing)} of {op.name}: pass e.g. "
                         + ",".join(f"{m}=64" for m in missing))
    check_sizes(op, bound)
    return bound


def _bind_from_shape(op: Op, name: str, shape: Sequence[int], bound: dict[str, int]) -> None:
    decl = op.tensor(name)
    if len(shape) != len(decl.shape):
        raise ShapeError(f"input {name} must have rank {len(decl.shape)} "
                         f"[{', '.join(map(str, decl.shape))}], got shape {tuple(shape)}")
    for axis, (form, size) in enumerate(zip(decl.shape, shape)):
        symbol = form.pure_symbol
        if symbol is not None:
            _set(bound, symbol, int(size), f"{name} axis {axis}")


def _solve_affine_axes(op: Op, shapes: Mapping[str, Sequence[int]], bound: dict[str, int]) -> None:
    """Bind symbols seen only in affine extents (X: f32[2*H]) and check every extent given."""
    progress = True
    while progress:
        progress = False
        for name, shape in shapes.items():
            for axis, (form, size) in enumerate(zip(op.tensor(name).shape, shape)):
                unbound = [(s, c) for s, c in form.terms if s not in bound]
                if len(unbound) != 1:
                    continue
                symbol, coeff = unbound[0]
                rest = Affine(tuple(t for t in form.terms if t[0] != symbol), form.const)
                value, remainder = divmod(int(size) - rest.evaluate(bound), coeff)
                if remainder:
                    raise ShapeError(f"input {name} axis {axis} has size {size}, which is not "
                                     f"{form} for any integer {symbol}")
                _set(bound, symbol, value, f"{name} axis {axis} = {form}")
                progress = True
    for name, shape in shapes.items():
        for axis, (form, size) in enumerate(zip(op.tensor(name).shape, shape)):
            if all(s in bound for s in form.symbols) and form.evaluate(bound) != int(size):
                raise ShapeError(f"input {name} axis {axis} has size {size} but {form} = "
                                 f"{form.evaluate(bound)} with {_fmt(bound)}")


def _set(bound: dict[str, int], symbol: str, value: int, where: str) -> None:
    if value < 1:
        raise ShapeError(f"{symbol} must be at least 1, got {value} (from {where})")
    if symbol in bound and bound[symbol] != value:
        raise ShapeError(f"{symbol} is {bound[symbol]} elsewhere but {value} from {where}")
    bound[symbol] = value


def check_sizes(op: Op, sizes: Mapping[str, int]) -> None:
    """Every declared extent is positive, index and size arithmetic stays inside int64
    (odl/overflow.py) and every access stays inside its tensor."""
    _check_sizes_once(op, tuple(sorted(sizes.items())))


@functools.lru_cache(maxsize=4096)
def _check_sizes_once(op: Op, items: tuple[tuple[str, int], ...]) -> None:
    sizes = dict(items)
    for decl in op.inputs + op.outputs + op.locals:
        for axis, form in enumerate(decl.shape):
            if form.evaluate(dict(sizes)) < 1:
                raise ShapeError(f"{decl.name} axis {axis} has extent {form} = "
                                 f"{form.evaluate(dict(sizes))} with {_fmt(sizes)}; it must be >= 1")
    # before the bounds test: an overflowing index is named at its line and column
    check_index_arithmetic(op, sizes)
    for index, stmt in enumerate(op.stmts):
        extents = stmt_extents(op, index)
        env = dict(extents.free)
        for node, reduce_extents in extents.reductions.items():
            _check_reduction(node, reduce_extents, stmt.line, sizes)
            env.update(reduce_extents)  # shadowed names share extents with their binding
        for node in walk(stmt.expr):
            if isinstance(node, Access) and node.pad is None:
                _check_access(op, node, env, sizes)


def _check_reduction(node: Reduce, extents: Mapping[str, Affine], line: int,
                     sizes: Mapping[str, int]) -> None:
    """A reduction runs over at least one element (a written extent may say fewer): max and
    min have no value over none, and every backend must give the same one."""
    for name, form in extents.items():
        value = form.evaluate(dict(sizes))
        if value < 1:
            where = f"line {node.loc[0] or line}"
            raise ShapeError(f"{node.op}[{name}: {form}] ({where}) runs over {value} elements "
                             f"with {_fmt(sizes)}; it must run over at least 1")


def _check_access(op: Op, access: Access, env: dict[str, Affine], sizes: Mapping[str, int]) -> None:
    decl = op.tensor(access.tensor)
    concrete = {name: Affine.constant(form.evaluate(dict(sizes))) for name, form in env.items()}
    for axis, form in enumerate(access.indices):
        low, high = index_range(form, {k: v for k, v in concrete.items() if k in form.symbols})
        low_v = low.evaluate(dict(sizes))
        high_v = high.evaluate(dict(sizes))
        limit = decl.shape[axis].evaluate(dict(sizes))
        if low_v < 0 or high_v >= limit:
            raise ShapeError(f"{access.tensor} axis {axis} is read at [{low_v}, {high_v}] but has "
                             f"extent {limit} with {_fmt(sizes)}")


def _fmt(sizes: Mapping[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sizes.items())


def shape_of(op: Op, name: str, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """Concrete shape of a tensor of the op."""
    return tuple(form.evaluate(dict(sizes)) for form in op.tensor(name).shape)


# Filter and pool-window dimensions beside spatial axes: small, as real layers have them.
SMALL_DIMS = {"R": 3, "S": 3, "KH": 3, "KW": 3, "P": 2}


# Elements of all tensors together that default sizes may reach (256 MiB in f32): a 4-D or 5-D
# op at 256 per dimension would need tens of GB before anything runs.
DEFAULT_ELEMENTS_LIMIT = 1 << 26


def runnable_sizes(op: Op, given: Mapping[str, int] | None = None) -> dict[str, int]:
    """Sizes that make `op` runnable at once, with `given` on top: 256 per dimension, or 32
    with small filter dimensions when the op has spatial axes (a conv at 256 everywhere needs
    hundreds of GB). R and S are filter sizes only beside spatial dims; in softmax R is rows.
    Dimensions not given are halved until the tensors fit DEFAULT_ELEMENTS_LIMIT together."""
    given = dict(given or {})
    spatial = bool({"H", "W", "L"} & set(op.dims))
    sizes = {d: SMALL_DIMS.get(d, 32) if spatial else 256 for d in op.dims}
    bound = _bind_first(op, given, sizes, {d: SMALL_DIMS.get(d, 32) for d in op.dims})
    while tensor_elements(op, bound) > DEFAULT_ELEMENTS_LIMIT:
        halved = {d: v // 2 if v >= 16 and d not in given else v for d, v in bound.items()}
        if halved == bound:
            break
        try:
            bound = bind_sizes(op, {**halved, **given})
        except ValueError:
            break
    return bound


def _bind_first(op: Op, given: dict[str, int], *candidates: dict[str, int]) -> dict[str, int]:
    for fallback in candidates:
        try:
            return bind_sizes(op, {**fallback, **given})
        except ValueError:
            continue
    return bind_sizes(op, {**candidates[0], **given})


def tensor_elements(op: Op, sizes: Mapping[str, int]) -> int:
    """Elements of all the op's tensors together at `sizes`."""
    total = 0
    for name in op.tensors:
        count = 1
        for extent in shape_of(op, name, sizes):
            count *= max(extent, 0)
        total += count
    return total
