"""UOL: the operator compiler. Describe an operator in ODL, get verified kernels for a target.

    >>> import uol_core
    >>> op = uol_core.parse("op scale(X: f32[N]) -> Y: f32[N]:\\n    Y[i] = X[i] * 2\\n")
    >>> op.name
    'scale'
"""

# First: without a GPU it switches Triton to its interpreter, which only works when set before
# anything imports triton (torch.compile does, on its first call).
from uol_core.runtime import triton_runner as _triton_runner  # noqa: F401, I001
from uol_core.api import compile, explain, run, tune
from uol_core.odl import OdlError, parse, parse_module
from uol_core.odl.cost import op_cost
from uol_core.odl.patterns import classify
from uol_core.odl.shapes import ShapeError
from uol_core.ops import list_ops, load_op
from uol_core.runtime.reference import evaluate
from uol_core.torch.bridge import to_torch

__all__ = [
    "OdlError", "ShapeError", "classify", "compile", "evaluate", "explain", "list_ops", "load_op",
    "op_cost", "parse", "parse_module", "run", "to_torch", "tune",
]
