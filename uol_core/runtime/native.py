"""Call a built C kernel in this process: ctypes on torch data pointers and strides, no copies."""

from __future__ import annotations

import ctypes
from array import array
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import torch

from uol_core.odl.shapes import ShapeError

_F32 = torch.float32


@lru_cache(maxsize=256)
def _library(path: str) -> ctypes.CDLL:
    return ctypes.CDLL(path)


def load_entry(path: str | Path, entry: str):
    """A kernel entry `void f(void **args, const int64_t *strides)` of a built library."""
    fn = getattr(_library(str(path)), entry)
    fn.restype = None
    fn.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return fn


def call_entry(fn, ptrs: list[int], strides: list[int]) -> None:
    """Call an entry on data pointers and strides. Both go in one int64 buffer, pointers first
    (a pointer is 8 bytes on every target we build for): one array.array per call, where two
    ctypes arrays cost 2.4 us, most of a small GEMM's call overhead."""
    words = array("q", ptrs)
    words.extend(strides or (0,))
    base = words.buffer_info()[0]
    fn(base, base + 8 * len(ptrs))


class NativeKernel:
    """A loaded kernel entry `void f(void **args, const int64_t *strides)` over named tensors,
    each of the dtype `dtypes` gives it (float32 where it names none: the GEMM template)."""

    def __init__(self, path: Path, entry: str, args: Sequence[str], shapes: Mapping[str, tuple],
                 dtypes: Mapping[str, torch.dtype] | None = None):
        self.fn = load_entry(path, entry)
        self.args = list(args)
        self.shapes = {k: tuple(v) for k, v in shapes.items()}
        self.dtypes = {name: (dtypes or {}).get(name, _F32) for name in self.args}
        self._expected = [(name, torch.Size(self.shapes[name]), self.dtypes[name])
                          for name in self.args]

    def launch_args(self) -> list[tuple[str, tuple, torch.dtype]]:
        """Name, shape and dtype of every argument, in the order the entry takes them."""
        return [(name, self.shapes[name], self.dtypes[name]) for name in self.args]

    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Run on `tensors` (every arg by name; outputs written in place)."""
        # One pass, few attribute reads: a small GEMM's whole call is a few microseconds, and
        # each tensor property read here costs 0.1-0.2 of one.
        ptrs: list[int] = []
        strides: list[int] = []
        for name, shape, dtype in self._expected:
            t = tensors[name]
            if t.dtype is not dtype or t.shape != shape or not t.is_cpu:
                self._refuse(name, t)
            ptrs.append(t.data_ptr())
            strides += t.stride()
        call_entry(self.fn, ptrs, strides)

    def _refuse(self, name: str, t: torch.Tensor) -> None:
        want = self.dtypes[name]
        if t.dtype != want:
            hint = "; convert with .float()" if want == _F32 else ""
            raise ShapeError(f"{name} must be {str(want).removeprefix('torch.')} (got {t.dtype})"
                             f"{hint}")
        if not t.is_cpu:
            raise ShapeError(f"{name} must be a CPU tensor, got one on {t.device}")
        raise ShapeError(f"{name} has shape {tuple(t.shape)}; this kernel was built for "
                         f"{self.shapes[name]}")
