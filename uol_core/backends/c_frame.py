"""The frame every C kernel shares: its includes and its entry point.

Every kernel is `void uol_<op>(void **args, const int64_t *strides)`: `args` holds the data
pointers of the op's inputs then outputs, `strides` every tensor's strides concatenated (the
loader in c_native passes both). Templates that read contiguous tensors ignore `strides`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from uol_core.backends.c import CodeWriter
from uol_core.backends.c_names import stride_id, tensor_id


def includes(*headers: str) -> str:
    """The #include lines of these C headers, in order."""
    return "\n".join(f"#include <{h}>" for h in headers)


def open_entry(w: CodeWriter, entry: str, args: Sequence[str], n_inputs: int, *,
               elem_type: Callable[[str], str] = lambda name: "float",
               ranks: Sequence[int] | None = None, blank_before: bool = False) -> None:
    """The entry's signature and a restrict pointer per argument (inputs const). With `ranks`,
    each tensor's strides are read into named constants; without, `strides` is unused."""
    w.emit(f"{chr(10) if blank_before else ''}void {entry}(void **args, const int64_t *strides)"
           f"\n{{" + ("" if ranks is not None else "\n    (void)strides;"))
    pos = 0
    for n, name in enumerate(args):
        qual = "const " if n < n_inputs else ""
        ctype = elem_type(name)
        text = f"    {qual}{ctype} *restrict {tensor_id(name)} = ({qual}{ctype} *)args[{n}];"
        if ranks is not None and ranks[n]:
            text += "\n    const int64_t " + ", ".join(
                f"{stride_id(name, d)} = strides[{pos + d}]" for d in range(ranks[n])) + ";"
            pos += ranks[n]
        w.emit(text)
