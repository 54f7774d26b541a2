"""The C driver of kernel sequences: one foreign call runs many kernels (entry `driver`).

A ctypes call costs 1-2 us and building its pointer array another 1-2; a training step of a
small model calls a dozen kernels of 5-50 us each, so those add up to several percent of it.
Two loops, built once like any kernel and cached:
- `uol_graph_run` (the memory-planned graph runtime): prebuilt (function, arguments, strides)
  triples, whose argument arrays the caller patches;
- `uol_plan_run` (launch plans, runtime/launch.py): a table of steps, each naming the slots
  of its arguments in one environment of pointers (inputs, outputs, intermediates) that the
  caller fills once per call, one pointer per tensor however many kernels read it.
"""

from __future__ import annotations

import ctypes
from functools import lru_cache

from uol_core.backends.base import KernelSource
from uol_core.runtime.build import build

DRIVER_C = """#include <stdint.h>
typedef void (*uol_kernel)(void **, const int64_t *);
void uol_graph_run(int64_t n, void **fns, void ***args, const int64_t **strides) {
    for (int64_t i = 0; i < n; i++) ((uol_kernel)fns[i])(args[i], strides[i]);
}
void uol_graph_noop(void **args, const int64_t *strides) { (void)args; (void)strides; }
/* table: the step count, then per step its function, its strides, its argument count and the
   slot in env of each argument */
void uol_plan_run(const int64_t *table, void *const *env) {
    const int64_t *at = table + 1;
    for (int64_t s = 0; s < table[0]; s++) {
        const int64_t count = at[2];
        void *args[count > 0 ? count : 1];
        for (int64_t i = 0; i < count; i++) args[i] = env[at[3 + i]];
        ((uol_kernel)(intptr_t)at[0])(args, (const int64_t *)(intptr_t)at[1]);
        at += 3 + count;
    }
}
"""


@lru_cache(maxsize=1)
def driver() -> ctypes.CDLL | None:
    """The C driver library; None when it cannot be built, and then kernels are called one by
    one from Python."""

    try:
        lib = ctypes.CDLL(str(build(KernelSource(DRIVER_C, "c", "uol_graph_run", "uol_graph_driver"))))
    except Exception:  # no compiler: the callers' Python loops do the same work, slower
        return None
    lib.uol_graph_run.restype = None
    lib.uol_graph_run.argtypes = [ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p]
    lib.uol_plan_run.restype = None
    lib.uol_plan_run.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
    return lib
