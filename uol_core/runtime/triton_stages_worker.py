"""Compile one Triton kernel for a GPU target in a child process and print its stages as JSON.

Run as a script (`python triton_stages_worker.py` with the request as JSON on stdin), not as a
module of the package: importing `uol_core` switches Triton to its interpreter on a machine
without a GPU, and an interpreted `@triton.jit` function cannot be compiled. This file imports
only the standard library and Triton, so the child starts with the compiler Triton ships.

Request: {"text", "file_name", "kernel", "signature", "constexprs", "divisible", "backend",
"arch", "warp_size", "num_warps", "num_stages", "binary" (also run the assembler)}. Answer: {"ok", "version", "stages":
{name: text}, "binaries": {name: bytes}} or {"ok": false, "error": one line}.
"""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import tempfile
from pathlib import Path

MIN_VERSION = (3, 0)  # ASTSource with a signature dict and GPUTarget in triton.backends.compiler
FOLDER_PREFIX = "uol-stages-"
TEMP_FOLDER = re.compile(r'[^"\s;()]*' + FOLDER_PREFIX + r'[^"/\s]+/?')


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:2]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits or 0))
    return tuple(parts)


def _one_line(exc: BaseException) -> str:
    """The message a user can act on: Triton's compile errors end with the reason after the
    quoted source, other errors start with it."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    if type(exc).__name__ == "CompilationError":
        where = lines[0].rstrip(":")  # "at 12:4" (line:column in the kernel function)
        return f"Triton rejects the kernel ({where}): {lines[-1]}"
    return f"{type(exc).__name__}: {lines[0]}"


def _load_kernel(request: dict, folder: Path):
    """Import the kernel text from a file (Triton reads the function's source from it)."""
    path = folder / request["file_name"]
    # the kernels never touch torch (only the host launcher does): the line is blanked, not
    # removed, so line numbers stay the source's, and the child skips a slow import
    lines = ["" if line.strip() == "import torch" else line
             for line in request["text"].split("\n")]
    path.write_text("\n".join(lines))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # the generated module: imports torch, triton; defines kernels
    fn = getattr(module, request["kernel"], None)
    if fn is None or not hasattr(fn, "arg_names"):
        raise LookupError(f"the module has no @triton.jit kernel named {request['kernel']}")
    return fn


def _without_binary(triton) -> bool:
    """Make Triton stop at the assembly text: its assembler stage (ptxas for cubin) returns no
    bytes. Assembling is most of the time of a large kernel, and the text stages do not need
    it. False when this Triton has no stage hook (it then assembles)."""
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    if runtime is None or not hasattr(runtime, "add_stages_inspection_hook"):
        return False

    def hook(*args):
        if not args:  # asked for its cache key: kernels without a binary are cached apart
            return "uol-text-stages-only", "uol-text-stages-only"
        backend, stages = args[0], args[1]
        if backend.binary_ext in stages:
            stages[backend.binary_ext] = lambda module, metadata: b""
        return None

    runtime.add_stages_inspection_hook = hook
    return True


def compile_request(request: dict) -> dict:
    """The stages of one kernel, or the one-line reason there are none."""
    try:
        import triton
    except ImportError:
        return {"ok": False, "error": "Triton is not installed (pip install 'uol-studio[gpu]' "
                                      "or pip install triton)"}
    version = getattr(triton, "__version__", "0")
    if _version_tuple(version) < MIN_VERSION:
        return {"ok": False, "version": version,
                "error": f"Triton {version} is too old to compile for a GPU it does not see: "
                         f"needs {'.'.join(map(str, MIN_VERSION))} or newer"}
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
    except ImportError as exc:
        return {"ok": False, "version": version,
                "error": f"Triton {version} lacks the offline compiler entry points ({exc})"}
    with tempfile.TemporaryDirectory(prefix=FOLDER_PREFIX) as tmp:
        folder = Path(tmp)
        skipped = not request.get("binary") and _without_binary(triton)
        try:
            fn = _load_kernel(request, folder)
            attrs = {(fn.arg_names.index(name),): [["tt.divisibility", 16]]
                     for name in request.get("divisible", [])}
            source = ASTSource(fn, signature=request["signature"],
                               constexprs=request.get("constexprs") or {}, attrs=attrs)
            target = GPUTarget(request["backend"], request["arch"], int(request["warp_size"]))
            options = {"num_warps": int(request["num_warps"]),
                       "num_stages": int(request["num_stages"])}
            kernel = triton.compile(source, target=target, options=options)
        except Exception as exc:  # every failure becomes the one line the Studio shows
            return {"ok": False, "version": version, "error": _one_line(exc)}
        stages, binaries = {}, {}
        for name, value in kernel.asm.items():
            if name == "source":
                continue
            if isinstance(value, bytes):
                if not skipped:
                    binaries[name] = len(value)
            else:  # the temporary folder is an accident of a run (this one or the one
                # Triton's cache kept the stages of): keep the file name
                stages[name] = TEMP_FOLDER.sub("", value)
    return {"ok": True, "version": version, "stages": stages, "binaries": binaries}


def main() -> None:
    request = json.loads(sys.stdin.read())
    json.dump(compile_request(request), sys.stdout)


if __name__ == "__main__":
    main()
