"""Run a cross-built C kernel under the emulator and get its outputs back as torch tensors.

The kernel is linked with a small harness program (`harness_source`): it reads one file holding
every argument's size, the strides and the input bytes, calls the kernel entry
`void f(void **args, const int64_t *strides)` exactly as the in-process loader does, and writes
the outputs' bytes to a second file. Outputs start as all-ones bytes (NaN for floats), so an
element the kernel never writes fails verification. Emulation checks results, never speed:
results carry EMULATED_NOTE instead of a time.
"""

from __future__ import annotations

import os
import struct
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import torch

from uol_core.backends.base import DeclaredArgs, KernelSource, into_given
from uol_core.odl.ir import Op
from uol_core.odl.shapes import ShapeError, shape_of
from uol_core.runtime.build import build_program
from uol_core.runtime.cross import EMULATED_NOTE, emulator_argv
from uol_core.runtime.reference import TORCH_DTYPES

MAGIC = 0x55_4F_4C_48_41_52_4E_31  # "UOLHARN1": a file of another format is refused
DEFAULT_TIMEOUT_S = 300.0

_HARNESS = r"""/* UOL emulation harness: reads the arguments, calls the kernel, writes the outputs. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void {entry}(void **args, const int64_t *strides);

static int64_t read_i64(FILE *f)
{{
    int64_t v;
    if (fread(&v, sizeof v, 1, f) != 1) {{ fprintf(stderr, "harness: truncated input\n"); exit(3); }}
    return v;
}}

int main(int argc, char **argv)
{{
    if (argc != 3) {{ fprintf(stderr, "usage: %s IN OUT\n", argv[0]); return 2; }}
    FILE *in = fopen(argv[1], "rb");
    if (!in) {{ perror(argv[1]); return 2; }}
    if (read_i64(in) != {magic}LL) {{ fprintf(stderr, "harness: not a UOL input file\n"); return 3; }}
    const int64_t nargs = read_i64(in), nstrides = read_i64(in);
    int64_t *bytes = calloc(nargs + 1, sizeof *bytes), *is_out = calloc(nargs + 1, sizeof *is_out);
    int64_t *strides = calloc(nstrides + 1, sizeof *strides);
    void **args = calloc(nargs + 1, sizeof *args);
    for (int64_t i = 0; i < nargs; ++i) {{ bytes[i] = read_i64(in); is_out[i] = read_i64(in); }}
    for (int64_t i = 0; i < nstrides; ++i) strides[i] = read_i64(in);
    for (int64_t i = 0; i < nargs; ++i) {{
        /* 64-byte aligned like torch's CPU allocator, rounded up so aligned_alloc accepts it */
        args[i] = aligned_alloc(64, (size_t)((bytes[i] + 63) / 64 * 64 + 64));
        if (is_out[i]) memset(args[i], 0xff, (size_t)bytes[i]);
        else if (bytes[i] && fread(args[i], 1, (size_t)bytes[i], in) != (size_t)bytes[i]) {{
            fprintf(stderr, "harness: truncated input %lld\n", (long long)i); return 3;
        }}
    }}
    fclose(in);
    {entry}(args, strides);
    FILE *out = fopen(argv[2], "wb");
    if (!out) {{ perror(argv[2]); return 2; }}
    for (int64_t i = 0; i < nargs; ++i)
        if (is_out[i] && bytes[i] && fwrite(args[i], 1, (size_t)bytes[i], out) != (size_t)bytes[i]) {{
            perror(argv[2]); return 2;
        }}
    return fclose(out) == 0 ? 0 : 2;
}}
"""


class EmulationError(RuntimeError):
    """The emulated kernel program failed (crash, timeout, bad exit): says which and why."""


def harness_source(entry: str) -> str:
    """The harness program's C text for a kernel whose entry function is `entry`."""
    return _HARNESS.format(entry=entry, magic=MAGIC)


def pack_arguments(tensors: list[tuple[torch.Tensor, bool]]) -> bytes:
    """The harness's input file: (tensor, is_output) per argument in entry order."""
    header = [MAGIC, len(tensors), sum(t.dim() for t, _ in tensors)]
    for t, is_output in tensors:
        header += [t.numel() * t.element_size(), int(is_output)]
    for t, _ in tensors:
        header += list(t.stride())
    payload = [_raw_bytes(t) for t, is_output in tensors if not is_output]
    return struct.pack(f"<{len(header)}q", *header) + b"".join(payload)


def _raw_bytes(t: torch.Tensor) -> bytes:
    flat = t.contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def unpack_outputs(data: bytes, outputs: list[tuple[str, torch.dtype, tuple]]) -> dict:
    """The outputs the harness wrote, back into tensors of their declared dtypes and shapes."""
    outs, offset = {}, 0
    for name, dtype, shape in outputs:
        size = torch.empty(shape, dtype=dtype).numel() * torch.empty((), dtype=dtype).element_size()
        chunk = bytearray(data[offset:offset + size])
        if len(chunk) != size:
            raise EmulationError(f"the emulated kernel wrote {len(data)} bytes of output; "
                                 f"{name} needs {size} more from byte {offset}")
        raw = torch.frombuffer(chunk, dtype=torch.uint8) if size else torch.empty(0, dtype=torch.uint8)
        outs[name] = raw.view(dtype).reshape(shape).clone()
        offset += size
    return outs


def run_program(program: Path, cross: dict, payload: bytes,
                timeout_s: float = DEFAULT_TIMEOUT_S) -> bytes:
    """Run the harness `program` under the emulator on `payload`; returns the output bytes."""
    argv = emulator_argv(cross)
    # Kernels ask for the target's core count; emulated threads that spin-wait at barriers
    # would only burn this host's cores, so waiting threads sleep.
    env = {**os.environ, "OMP_WAIT_POLICY": "passive"}
    with tempfile.TemporaryDirectory(prefix="uol-emu-") as tmp:
        in_file, out_file = Path(tmp) / "in.bin", Path(tmp) / "out.bin"
        in_file.write_bytes(payload)
        try:
            done = subprocess.run([*argv, str(program), str(in_file), str(out_file)], env=env,
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            raise EmulationError(f"the emulated kernel ran past {timeout_s:g} s under {argv[0]} "
                                 "(it hangs, or the sizes are too large to emulate)") from None
        except OSError as exc:
            raise EmulationError(f"cannot start the emulator {argv[0]}: {exc}") from None
        if done.returncode != 0:
            how = (f"died of signal {-done.returncode}" if done.returncode < 0
                   else f"exited with status {done.returncode}")
            raise EmulationError(f"the emulated kernel {how} under {argv[0]}: "
                                 f"{done.stderr.strip()[-500:]}")
        return out_file.read_bytes()


class EmulatedKernel(DeclaredArgs):
    """A C kernel built for another architecture, called like CKernel: each call runs the
    harness program under the emulator. `timing_note` tells callers not to time it."""

    timing_note = EMULATED_NOTE

    def __init__(self, src: KernelSource, op: Op, sizes: Mapping[str, int],
                 float32_only: bool = False) -> None:
        if not src.meta.get("cross"):
            raise ValueError(f"the {src.op_name} kernel is not a cross build (no meta['cross'])")
        self.src, self.op, self.sizes = src, op, dict(sizes)
        self.cross = src.meta["cross"]
        self.path = build_program(src, harness_source(src.entry))

        def dtype_of(name: str) -> torch.dtype:
            return torch.float32 if float32_only else TORCH_DTYPES[op.tensor(name).dtype]
        self._args = [(name, dtype_of(name), shape_of(op, name, self.sizes))
                      for name in src.meta["args"]]
        outputs = set(src.meta.get("outputs") or [d.name for d in op.outputs])
        self._outputs = [a for a in self._args if a[0] in outputs]

    def run(self, tensors: Mapping[str, torch.Tensor],
            out: Mapping[str, torch.Tensor] | None = None) -> dict[str, torch.Tensor]:
        """Run under the emulator; inputs are converted to their declared dtypes."""
        outputs = {name for name, _, _ in self._outputs}
        packed = []
        for name, dtype, want in self._args:
            if name in outputs:
                packed.append((torch.empty(want, dtype=dtype), True))
                continue
            t = tensors[name]
            if tuple(t.shape) != tuple(want):
                raise ShapeError(f"{name} has shape {tuple(t.shape)}; this kernel was built "
                                 f"for {want}")
            packed.append((t.to(dtype).contiguous(), False))
        data = run_program(self.path, self.cross, pack_arguments(packed))
        got = unpack_outputs(data, self._outputs)
        if out:
            for name, tensor in out.items():
                if tensor is not None and name in got:
                    tensor.copy_(got[name])
                    got[name] = tensor
        return got

    def run_with(self, tensors: Mapping[str, torch.Tensor], out=None) -> dict[str, torch.Tensor]:
        """`run` with `out` as compile() takes it: None, one tensor, or a dict by output name."""
        return into_given(self.run(tensors), out, self.src)

    def __call__(self, tensors: Mapping[str, torch.Tensor]) -> None:
        """NativeKernel's calling form: every argument by name, outputs written in place."""
        outputs = {name for name, _, _ in self._outputs}
        self.run(tensors, {n: t for n, t in tensors.items() if n in outputs})
