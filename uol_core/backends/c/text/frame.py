"""The frame every C kernel shares: its includes and its entry point.

Every kernel is `void uol_<op>(void **args, const int64_t *strides)`: `args` holds the data
pointers of the op's inputs then outputs, `strides` every tensor's strides concatenated (the
loader in c.native passes both). Templates that read contiguous tensors ignore `strides`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from uol_core.backends.c.text.names import stride_id, tensor_id
from uol_core.backends.c.text.writer import CodeWriter


def includes(*headers: str) -> str:
    """The #include lines of these C headers, in order."""
    return "\n".join(f"#include <{h}>" for h in headers)


def open_entry(w: CodeWriter, entry: str, args: Sequence[str], n_inputs: int, *,
               elem_type: Callable[[str], str] = lambda name: "float",
               ranks: Sequence[int] | None = None, blank_before: bool = False,
               aliases: Mapping[str, str] | None = None,
               counts: Callable[[str], int] | None = None) -> None:
    """The entry's signature and a restrict pointer per argument (inputs const). With `ranks`,
    each tensor's strides are read into named constants; without, `strides` is unused.
    `aliases` (output -> input, ODL's `aliases`) with `counts` (elements per tensor): see
    `_aliased_inputs`."""
    w.emit(f"{chr(10) if blank_before else ''}void {entry}(void **args, const int64_t *strides)"
           f"\n{{" + ("" if ranks is not None else "\n    (void)strides;"))
    pos = 0
    written_over = set((aliases or {}).values())
    for n, name in enumerate(args):
        if name in written_over:  # read through its output's pointer (below)
            pos += ranks[n] if ranks is not None else 0
            continue
        qual = "const " if n < n_inputs else ""
        ctype = elem_type(name)
        text = f"    {qual}{ctype} *restrict {tensor_id(name)} = ({qual}{ctype} *)args[{n}];"
        if ranks is not None and ranks[n]:
            text += "\n    const int64_t " + ", ".join(
                f"{stride_id(name, d)} = strides[{pos + d}]" for d in range(ranks[n])) + ";"
            pos += ranks[n]
        w.emit(text)
    if aliases:
        _aliased_inputs(w, args, aliases, elem_type, counts)


def _aliased_inputs(w: CodeWriter, args: Sequence[str], aliases: Mapping[str, str],
                    elem_type: Callable[[str], str], counts: Callable[[str], int] | None) -> None:
    """An input that an output is written over is read through the output's pointer: one
    restrict pointer per object, as C requires when a kernel writes what it reads (two
    restrict pointers to one buffer would be undefined). A caller that passes two buffers
    keeps value semantics: the input is copied into the output first."""
    for out, source in aliases.items():
        ctype, n_in = elem_type(source), args.index(source)
        w.emit(f"    /* {out} is written over {source} (ODL `aliases`): in place when the caller "
               f"passes one buffer */\n"
               f"    if (args[{args.index(out)}] != args[{n_in}])\n"
               f"        memcpy({tensor_id(out)}, args[{n_in}], sizeof({ctype}) * {counts(out)});\n"
               f"    const {ctype} *{tensor_id(source)} = {tensor_id(out)};")
