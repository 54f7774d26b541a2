"""Assembly of a generated C kernel, as Compiler Explorer shows it: gcc -g -c with the kernel's own
flags, then objdump -d -l, each instruction tied to the C line it came from and, through the
kernel's line map, to the ODL line behind that.

The compile and the disassembly run as bounded child processes (`run_bounded_compiler`: own
process group, time and address-space limits), never in the server's own process, and the
listing is capped at `MAX_INSTRUCTIONS` so a heavily unrolled kernel cannot flood the page.

Deferred imports: an engine loads when the service first calls it, so the server starts fast.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path

from uol_core.backends.base import KernelSource

MAX_INSTRUCTIONS = 4000  # rows of the listing; the rest is counted, not shown
# gcc's inlined intrinsics are attributed to their header (avx512fintrin.h:886); the
# instruction belongs to the kernel line that called them, the last kernel line seen
_LOCATION = re.compile(r"^(?P<file>\S+?):(?P<line>\d+)(?: \(discriminator \d+\))?$")
_FUNCTION = re.compile(r"^[0-9a-f]+ <(?P<name>[^>]+)>:$")
_INSTRUCTION = re.compile(r"^\s*(?P<addr>[0-9a-f]+):\s+(?P<text>.+)$")
_RELOCATION = re.compile(r"^\s*[0-9a-f]+: (?P<kind>R_\w+)\s+(?P<symbol>\S+)")
# objdump's own comments: "   # 76 <fn+0x76>" on x86, "// b.any" on ARM ('#' alone is an ARM immediate)
_COMMENT = re.compile(r"\s{2,}#.*$|\s*//.*$")
ARM_ISAS = ("neon", "sve", "sve2")


@dataclass
class AsmRow:
    """One listing row: a function header, or an instruction with its C line (0: none)."""

    text: str
    address: str = ""
    c_line: int = 0
    odl_line: int = 0
    function: bool = False
    inlined_from: str = ""  # the header an inlined intrinsic's instruction comes from


@dataclass
class AsmListing:
    """The disassembly of one kernel build, or why there is none."""

    ok: bool
    compiler: str = ""
    flags: list[str] = field(default_factory=list)
    rows: list[AsmRow] = field(default_factory=list)
    instructions: int = 0  # all of them, including those past MAX_INSTRUCTIONS
    error: str = ""

    @property
    def truncated(self) -> bool:
        return self.instructions > sum(1 for r in self.rows if not r.function)

    def summary(self) -> str:
        """'gcc (Debian 12.2.0-14) 12.2.0 · -O3 ... · 412 instructions' (and what was left out)."""
        if not self.ok:
            return self.error
        shown = sum(1 for r in self.rows if not r.function)
        more = (f" (first {shown} shown; the listing is capped at {MAX_INSTRUCTIONS})"
                if self.truncated else "")
        return f"{self.compiler} · {' '.join(self.flags)} · {self.instructions} instructions{more}"


def toolchain(isa: tuple[str, ...], cpu_flags: tuple[str, ...] = ()
              ) -> tuple[str, str, tuple[str, ...]] | None:
    """(compiler, objdump, machine flags) for a target's ISA list: the host's gcc for x86
    targets, the aarch64 cross toolchain for ARM ones with the HFL's flags for that CPU
    (`cpu_flags`, e.g. -mcpu=neoverse-v1); None when the tools are not installed."""
    if any(name in ARM_ISAS for name in isa):
        cc, dump = shutil.which("aarch64-linux-gnu-gcc"), shutil.which("aarch64-linux-gnu-objdump")
        if not cc or not dump:
            return None
        generic = ("-march=armv8.2-a+sve" if "sve" in isa else "-march=armv8.2-a",)
        return cc, dump, tuple(cpu_flags) or generic
    dump = shutil.which("objdump")
    return ("gcc", dump, ()) if dump else None


def build_flags(src: KernelSource, machine: tuple[str, ...]) -> list[str]:
    """The kernel's own build flags (uol_core.runtime.build), as an object with debug lines:
    -shared gives way to -c; on a cross target the host's -march=native gives way to `machine`."""
    from uol_core.runtime.build import flags_for

    flags = [f for f in flags_for(src) if f != "-shared"]
    if machine:
        flags = [f for f in flags if f != "-march=native" and not f.startswith("-mavx")
                 and f != "-mfma"] + list(machine)
    return [*flags, "-g", "-c"]


def disassemble(src: KernelSource, isa: tuple[str, ...] = (),
                cpu_flags: tuple[str, ...] = ()) -> AsmListing:
    """Build `src` with debug lines for a target of ISA list `isa` (and HFL compiler flags
    `cpu_flags`) and disassemble it; failures come back in the listing."""
    if src.lang != "c":
        return AsmListing(False, error=f"the assembly view shows C kernels; this is a {src.lang} "
                                       "kernel (choose the C backend)")
    from uol_core.runtime.build import kernel_isa

    return _disassemble(src.text, tuple(sorted(src.line_map.items())), src.op_name,
                        kernel_isa(src), tuple(isa), tuple(cpu_flags))


@lru_cache(maxsize=32)
def _disassemble(text: str, line_map: tuple, op_name: str, kernel_isa: str,
                 isa: tuple, cpu_flags: tuple) -> AsmListing:
    from uol_core.runtime.build import BuildError, run_bounded_compiler

    src = KernelSource(text=text, lang="c", entry="", op_name=op_name,
                       line_map=dict(line_map), meta={"isa": kernel_isa})
    tools = toolchain(isa, cpu_flags)
    if tools is None:
        need = "gcc-aarch64-linux-gnu" if any(n in ARM_ISAS for n in isa) else "binutils"
        return AsmListing(False, error=f"no disassembler for this target: install {need}")
    cc, objdump, machine = tools
    flags = build_flags(src, machine)
    with tempfile.TemporaryDirectory(prefix="uol-asm-") as tmp:
        c_file, obj = Path(tmp) / "kernel.c", Path(tmp) / "kernel.o"
        c_file.write_text(text, encoding="utf-8")
        label = f"the {op_name} kernel for its assembly"
        try:
            built = run_bounded_compiler([*flags, str(c_file), "-o", str(obj)], label,
                                         compiler=cc)
            if built.returncode != 0:
                first = next((ln for ln in built.stderr.splitlines() if "error" in ln),
                             built.stderr.strip()[-300:])
                return AsmListing(False, compiler=_version(cc), flags=flags,
                                  error=f"gcc could not build the kernel: {first.strip()}")
            dumped = run_bounded_compiler(["-d", "-l", "-r", "-w", "-C", "--no-show-raw-insn",
                                           *(["-M", "intel"] if not machine else []), str(obj)],
                                          label, compiler=objdump)
        except BuildError as exc:
            return AsmListing(False, compiler=_version(cc), flags=flags, error=str(exc))
    if dumped.returncode != 0:
        return AsmListing(False, compiler=_version(cc), flags=flags,
                          error=f"objdump failed: {dumped.stderr.strip()[-300:]}")
    rows, count = parse_objdump(dumped.stdout, src.line_map)
    return AsmListing(True, _version(cc), flags, rows, count)


@lru_cache(maxsize=4)
def _version(cc: str) -> str:
    import subprocess

    try:
        out = subprocess.run([cc, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return cc
    return out.stdout.splitlines()[0] if out.stdout else cc


def parse_objdump(text: str, line_map: dict[int, int],
                  limit: int = MAX_INSTRUCTIONS) -> tuple[list[AsmRow], int]:
    """objdump -d -l -r output -> rows (at most `limit` instructions) and the instruction count.

    A location line (`.../kernel.c:84`) sets the C line of the instructions after it; one in a
    header (an inlined intrinsic) keeps the kernel line and notes the header. A relocation line
    names the symbol the instruction before it calls or loads (`call 25` -> `call expf`)."""
    rows: list[AsmRow] = []
    c_line, inlined, count = 0, "", 0
    for raw in text.splitlines():
        line = raw.rstrip()
        if not line:
            continue
        func = _FUNCTION.match(line)
        if func:
            rows.append(AsmRow(func.group("name") + ":", function=True))
            c_line, inlined = 0, ""
            continue
        where = _LOCATION.match(line.strip())
        if where and not line.startswith(" "):
            if Path(where.group("file")).name == "kernel.c":
                c_line, inlined = int(where.group("line")), ""
            else:
                inlined = f"{Path(where.group('file')).name}:{where.group('line')}"
            continue
        reloc = _RELOCATION.match(line)
        if reloc:
            if rows and not rows[-1].function and count <= limit:
                rows[-1].text += f"  # {reloc.group('symbol')}"
            continue
        ins = _INSTRUCTION.match(line)
        if not ins:
            continue  # "kernel.o: file format", section headers, "func():" labels
        count += 1
        if count > limit:
            continue
        rows.append(AsmRow(" ".join(_COMMENT.sub("", ins.group("text")).split()), ins.group("addr"),
                           c_line, int(line_map.get(c_line, 0) or 0), inlined_from=inlined))
    return rows, count
