"""Call a built C kernel in this process: ctypes on torch data pointers and strides, no copies."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path

import torch

from uol_core.odl.shapes import ShapeError


@lru_cache(maxsize=256)
def _library(path: str) -> ctypes.CDLL:
    return ctypes.CDLL(path)


class NativeKernel:
    """A loaded kernel entry `void f(void **args, const int64_t *strides)` over named tensors."""

    def __init__(self, path: Path, entry: str, args: Sequence[str], shapes: Mapping[str, tuple]):
        self.fn = getattr(_library(str(path)), entry)
        self.fn.restype = None
        self.fn.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.POINTER(ctypes.c_int64)]
        self.args = list(args)
        self.shapes = {k: tuple(v) for k, v in shapes.items()}
        self._ptr_type = ctypes.c_void_p * len(self.args)
        # every argument's strides, in order (the arrays' types are made once: a small GEMM's
        # call is a few microseconds of work, and building ctypes types per call was several)
        self._stride_type = ctypes.c_int64 * max(1, sum(len(s) for s in self.shapes.values()
                                                         if s is not None) or 1)

    def launch_args(self) -> list[tuple[str, tuple, torch.dtype]]:
        """Name, shape and dtype of every argument, in the order the entry takes them."""
        return [(name, self.shapes[name], torch.float32) for name in self.args]

    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """Run on `tensors` (every arg by name; outputs written in place)."""
        ordered = [tensors[name] for name in self.args]
        strides = []
        for name, t in zip(self.args, ordered):
            if t.shape != self.shapes[name]:
                raise ShapeError(f"{name} has shape {tuple(t.shape)}; this kernel was built for "
                                 f"{self.shapes[name]}")
            if t.dtype != torch.float32 or not t.is_cpu:
                raise ShapeError(f"{name} must be a float32 CPU tensor, got {t.dtype} on {t.device}")
            strides.extend(t.stride())
        ptrs = self._ptr_type(*[t.data_ptr() for t in ordered])
        stride_type = self._stride_type if len(strides) == self._stride_type._length_ else \
            ctypes.c_int64 * max(1, len(strides))
        self.fn(ptrs, stride_type(*strides))
