"""The CPU sanitizer: build a C kernel with AddressSanitizer + UBSan, run it, map findings to ODL."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import uol_core
from profilers.hotspots import _kernel_source, build_driver_binary
from profilers.pyinstrument_source import _compile_api, op_spec_text
from uol_core.backends.base import KernelSource
from uol_core.odl.shapes import shape_of
from uol_core.runtime import build as kbuild

# -O1 keeps the loops recognisable; no OpenMP: the sanitizer runtime and libgomp's thread pool
# do not mix well, and one thread finds the same out-of-bounds index. The machine flags are the
# normal build's (kbuild.TARGET_FLAGS, plus the kernel's ISA flags that build_driver_binary
# adds): a template that chose AVX-512 intrinsics for the host only compiles with them.
SANITIZE_FLAGS = ("-O1", "-g", "-std=gnu11", "-fno-omit-frame-pointer", "-fno-math-errno",
                  "-fsanitize=address,undefined", "-Wno-unknown-pragmas", *kbuild.TARGET_FLAGS)
_FRAME = re.compile(r"#\d+ 0x[0-9a-f]+ in (\S+) (\S*kernel\.c):(\d+)")
_UBSAN = re.compile(r"(\S*kernel\.c):(\d+):\d+: runtime error: (.*)")
_ASAN = re.compile(r"ERROR: AddressSanitizer: ([\w-]+)(.*)")
# The error's own name (e.g. invalid-aligned-alloc-alignment) where the first line is prose.
_SUMMARY = re.compile(r"SUMMARY: AddressSanitizer: ([\w-]+)")
_ACCESS = re.compile(r"(READ|WRITE) of size (\d+)")


@dataclass
class Finding:
    """One sanitizer report, located in the kernel and in the ODL."""

    kind: str  # e.g. heap-buffer-overflow, or "undefined behaviour"
    message: str
    kernel_line: int | None
    odl_line: int | None
    kernel_text: str = ""


@dataclass
class SanitizerReport:
    """What the sanitized run found; `clean` when nothing."""

    op_name: str
    findings: list[Finding] = field(default_factory=list)
    exit_code: int = 0
    stderr_tail: str = ""

    @property
    def clean(self) -> bool:
        return not self.findings

    def to_dict(self) -> dict:
        return {"op": self.op_name, "clean": self.clean, "exit_code": self.exit_code,
                "findings": [asdict(f) for f in self.findings], "stderr_tail": self.stderr_tail}


def build_sanitized(src: KernelSource, shapes: Mapping[str, Sequence[int]]) -> Path:
    """Kernel + exact-allocation driver built with ASan/UBSan into the kernel cache."""
    if src.lang != "c":
        raise ValueError(f"the sanitizer needs a C kernel; this one is {src.lang}")
    return build_driver_binary(src, shapes, SANITIZE_FLAGS, "sanitize", exact_allocation=True)


def sanitize(src: KernelSource, shapes: Mapping[str, Sequence[int]],
             timeout: float = 120.0) -> SanitizerReport:
    """Run the kernel once under the sanitizers and return its findings."""
    exe = build_sanitized(src, shapes)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0:abort_on_error=0",
               UBSAN_OPTIONS="print_stacktrace=1")
    proc = subprocess.run([str(exe), "1"], capture_output=True, text=True, timeout=timeout, env=env)
    report = SanitizerReport(src.op_name, parse_findings(proc.stderr, src), proc.returncode,
                             "\n".join(proc.stderr.splitlines()[-30:]))
    if proc.returncode != 0 and not report.findings:
        report.findings.append(Finding("crash", f"the kernel exited with status {proc.returncode}",
                                       None, None))
    return report


def parse_findings(stderr: str, src: KernelSource) -> list[Finding]:
    """ASan errors (first kernel frame of the stack) and UBSan runtime errors, deduplicated."""
    lines = src.text.splitlines()
    found: list[Finding] = []
    seen: set[tuple] = set()

    def add(kind: str, message: str, line: int | None) -> None:
        if (kind, line) in seen:
            return
        seen.add((kind, line))
        text = lines[line - 1].strip() if line and 0 < line <= len(lines) else ""
        found.append(Finding(kind, message, line, src.line_map.get(line) if line else None, text))

    chunks = stderr.split("=================================================================")
    for chunk in chunks:
        asan = _ASAN.search(chunk)
        if asan:
            frame = _FRAME.search(chunk)
            access = _ACCESS.search(chunk)
            summary = _SUMMARY.search(chunk)
            kind = summary.group(1) if summary and summary.group(1) != "SEGV" else asan.group(1)
            if access:
                message = f"{kind}: {access.group(1).lower()} of {access.group(2)} bytes"
            else:  # say what it is in ASan's words, without addresses and thread ids
                words = re.sub(r"\s*\(thread T\d+\)|\s+on (unknown )?address.*", "",
                               asan.group(1) + asan.group(2)).strip()
                message = words if words != kind else kind
            add(kind, message, int(frame.group(3)) if frame else None)
    for match in _UBSAN.finditer(stderr):
        add("undefined behaviour", match.group(3).strip(), int(match.group(2)))
    return found


def sanitize_op(op_spec: str, sizes: Mapping[str, int], target: str = "host",
                config: dict | str | None = None) -> SanitizerReport:
    """Compile an operator with the C backend and run it under the sanitizers."""

    op = uol_core.parse(op_spec_text(op_spec))
    kernel = _compile_api()(op, shapes=dict(sizes), target=target, backend="c", config=config)
    src = _kernel_source(kernel)
    shapes = {d.name: shape_of(op, d.name, sizes) for d in op.inputs + op.outputs}
    return sanitize(src, shapes)
