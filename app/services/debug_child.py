"""Worker process of the Debugger page: trace one Triton kernel under the interpreter, save the trace.

Runs inside the sandbox (`uol_core.runtime.sandbox`) with a JSON request on stdin, so a user's
kernel (or a crash in the interpreter) never runs in the server process, and runs limited.

Deferred imports: a child process loads only the engine its request needs, so it starts fast.
"""

from __future__ import annotations

import os
from pathlib import Path

from app.services.child_io import serve_one

os.environ["TRITON_INTERPRET"] = "1"  # before triton is imported anywhere

MARK = "@@TRACE@@"
MAKERS = ("randn", "zeros", "ones", "arange")


def parse_args(text: str) -> dict:
    """Kernel arguments `x=randn:100 y=zeros:8x8 n=100 BLOCK=32` (tensors: maker:shape)."""
    import torch

    out: dict = {}
    for item in text.replace(",", " ").split():
        name, eq, value = item.partition("=")
        if not eq or not name.isidentifier() or not value:
            raise ValueError(f"argument '{item}' must be NAME=VALUE, e.g. x=randn:100 or n=100")
        if ":" in value:
            kind, _, shape = value.partition(":")
            if kind not in MAKERS:
                raise ValueError(f"unknown tensor maker '{kind}': use {', '.join(MAKERS)}")
            dims = tuple(int(x) for x in shape.split("x"))
            if any(d < 1 for d in dims) or len(dims) > 4 or int(torch.tensor(dims).prod()) > 1 << 20:
                raise ValueError(f"tensor {name}: shape {shape} must be 1-4 positive dims, <= 1M elements")
            out[name] = (torch.arange(float(dims[0])) if kind == "arange"
                         else getattr(torch, kind)(*dims))
        else:
            out[name] = float(value) if "." in value or "e" in value else int(value)
    return out


def trace(request: dict) -> dict:
    """Run the request's kernel under the recorder, save it under request['out']; the summary."""
    from uol_core.debug import load_kernel, save_trace, summary, trace_kernel, trace_op

    limit = int(request.get("max_programs", 64))
    if request["kind"] == "op":
        from uol_core.ops import load_op

        tr, _ = trace_op(load_op(request["op"]), sizes=request["sizes"], max_programs=limit)
    else:  # the user's source, written into this sandbox's private directory
        path = Path("user_kernel.py").resolve()
        path.write_text(request["source"])
        fn = load_kernel(f"{path}:{request['function']}")
        grid = tuple(int(g) for g in request["grid"])
        tr = trace_kernel(fn, grid, max_programs=limit, **parse_args(request["args"]))
    save_trace(tr, request["out"])
    return summary(tr)


def main() -> None:
    """Read the request, trace, print the marked JSON summary (or the error)."""
    serve_one(trace, MARK, "summary")


if __name__ == "__main__":
    main()
