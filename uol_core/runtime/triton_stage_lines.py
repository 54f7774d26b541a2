"""Which line of the Triton source each line of a compiler stage came from.

Triton keeps the source position through every stage as debug info, in each stage's own form:
    TTIR, TTGIR (MLIR)  `... loc(#loc12)` at the end of an op, with `#loc12 = loc("k.py":51:18)`,
                        a named `loc("x"(#loc3))` or an inlined `loc(callsite(#callee at #caller))`
    LLVM IR             `..., !dbg !13` with `!13 = !DILocation(line: 51, column: 18, scope: !4)`
                        (`inlinedAt: !21` when the line is inside an inlined library function)
    PTX, AMDGCN         `.loc 1 51 18` before the instructions of that line; `.file 1 "k.py"`
Only positions in the kernel's own file count: a line of `tl.max`'s body in triton/language
maps to the line of the kernel that called it.
"""

from __future__ import annotations

import re

_MLIR_ALIAS = re.compile(r"^(#loc\d*)\s*=\s*loc\((.*)\)\s*$")
_MLIR_FILE = re.compile(r'^"([^"]*)":(\d+):\d+')
_MLIR_NAMED = re.compile(r'^"[^"]*"\((#loc\d*)\)$')
_MLIR_CALLSITE = re.compile(r"^callsite\((#loc\d*) at (#loc\d*)\)$")
_MLIR_USE = re.compile(r"loc\((#loc\d*|\"[^\"]*\":\d+:\d+)\)\s*$")
_LLVM_META = re.compile(r"^(!\d+)\s*=\s*(?:distinct\s+)?!(\w+)\((.*)\)\s*$")
_LLVM_DBG = re.compile(r"!dbg (!\d+)")
_PTX_LOC = re.compile(r"^\s*\.loc\s+(\d+)\s+(\d+)\s+\d+")
_PTX_FILE = re.compile(r'^\s*\.file\s+(\d+)\s+"([^"]*)"(?:\s+"([^"]*)")?')


def _is_ours(path: str, file_name: str) -> bool:
    return path == file_name or path.endswith("/" + file_name)


def mlir_source_lines(text: str, file_name: str) -> dict[int, int]:
    """Stage line (1-based) -> kernel source line, for a TTIR or TTGIR listing."""
    aliases = {m.group(1): m.group(2) for m in map(_MLIR_ALIAS.match, text.splitlines()) if m}
    memo: dict[str, int | None] = {}

    def resolve(body: str, depth: int = 0) -> int | None:
        if depth > 32:  # alias chains are short; a cycle would be a malformed listing
            return None
        if body.startswith("#loc"):
            if body not in memo:
                memo[body] = None
                memo[body] = resolve(aliases.get(body, "unknown"), depth + 1)
            return memo[body]
        if m := _MLIR_FILE.match(body):
            return int(m.group(2)) if _is_ours(m.group(1), file_name) else None
        if m := _MLIR_NAMED.match(body):
            return resolve(m.group(1), depth + 1)
        if m := _MLIR_CALLSITE.match(body):  # inlined: the callee if it is ours, else the caller
            return resolve(m.group(1), depth + 1) or resolve(m.group(2), depth + 1)
        return None

    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        if _MLIR_ALIAS.match(line):
            continue
        m = _MLIR_USE.search(line)
        if m and (source := resolve(m.group(1))):
            out[number] = source
    return out


def _fields(body: str) -> dict[str, str]:
    """`line: 51, column: 18, scope: !4` -> {'line': '51', ...} (nested values are not needed)."""
    return {k.strip(): v.strip() for k, _, v in
            (part.partition(":") for part in body.split(", ")) if k.strip()}


def llvm_source_lines(text: str, file_name: str) -> dict[int, int]:
    """Stage line -> kernel source line, for an LLVM IR listing with debug metadata."""
    meta: dict[str, tuple[str, dict[str, str]]] = {}
    for line in text.splitlines():
        if m := _LLVM_META.match(line):
            meta[m.group(1)] = (m.group(2), _fields(m.group(3)))

    def file_of(ref: str, depth: int = 0) -> str:
        kind, fields = meta.get(ref, ("", {}))
        if kind == "DIFile":
            return fields.get("filename", "").strip('"')
        if depth > 32:
            return ""
        if "file" in fields:
            return file_of(fields["file"], depth + 1)
        return file_of(fields["scope"], depth + 1) if "scope" in fields else ""

    def resolve(ref: str, depth: int = 0) -> int | None:
        kind, fields = meta.get(ref, ("", {}))
        if kind != "DILocation" or depth > 32:
            return None
        if _is_ours(file_of(fields.get("scope", "")), file_name):
            return int(fields["line"]) if fields.get("line", "").isdigit() else None
        return resolve(fields["inlinedAt"], depth + 1) if "inlinedAt" in fields else None

    out = {}
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("!"):
            continue
        m = _LLVM_DBG.search(line)
        if m and (source := resolve(m.group(1))):
            out[number] = source
    return out


def ptx_source_lines(text: str, file_name: str) -> dict[int, int]:
    """Stage line -> kernel source line, for PTX (and AMDGCN, which writes the same `.loc`
    directives): each `.loc` holds until the next one.

    A `.loc` into another file (a library function inlined into the kernel) keeps the last
    line of the kernel's own file, the line that called it; so does a `.loc` inside an inline
    asm block."""
    lines = text.splitlines()
    ours = {m.group(1) for m in map(_PTX_FILE.match, lines)  # AMDGCN: "folder" "file"
            if m and _is_ours(m.group(3) or m.group(2), file_name)}
    out: dict[int, int] = {}
    current: int | None = None
    in_asm = False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        if stripped in ("// begin inline asm", "// end inline asm"):
            in_asm = stripped == "// begin inline asm"
            continue
        if m := _PTX_LOC.match(line):
            # inside an inline asm block LLVM numbers the block's own lines on from the call
            # (56, 57, 58 for one load): the .loc before the block is the true one
            if m.group(1) in ours and not in_asm:
                current = int(m.group(2)) or None  # line 0: code of no source line
            continue
        if stripped == "}":  # the end of the function: what follows is not its code
            current = None
        if current and stripped and not stripped.startswith(("//", ";", ".file", "$L")):
            out[number] = current
    return out


def source_lines(stage: str, text: str, file_name: str) -> dict[int, int]:
    """The stage's line map by the kind of listing the stage is (empty for one without)."""
    if stage in ("ttir", "ttgir"):
        return mlir_source_lines(text, file_name)
    if stage == "llir":
        return llvm_source_lines(text, file_name)
    if stage in ("ptx", "amdgcn"):
        return ptx_source_lines(text, file_name)
    return {}
