"""Functionalise an exported program before the import walks it.

`torch.export` (non-strict) keeps the module's in-place ops (`relu_` of `ReLU(inplace=True)`,
`add_` of `out += identity`, `hardtanh_` of `ReLU6`) and wraps no_grad / autocast regions in
higher-order calls on submodules. `ExportedProgram.run_decompositions` functionalises it: every
in-place and out= form becomes its functional op (the values are the same; every tensor is
then written once), wrapped regions are inlined, and the ops in the decomposition table are
decomposed to Core ATen. The table here is the Core ATen one less the ops that map to one ODL
op whole (linear, conv2d, layer_norm, SDPA, ...): their decompositions would map to several.
"""

from __future__ import annotations

import warnings

import torch
from torch.export import ExportedProgram

# a functional form's node renamed after the op the module called (signatures name no such node)
FUNCTIONAL_NAMES = {"_native_batch_norm_legit_no_training": "batch_norm"}


def functionalize(program: ExportedProgram) -> tuple[ExportedProgram, str]:
    """`program` with in-place and out= forms replaced by functional ones, ops without an ODL
    rule decomposed to Core ATen (which may map); returns (program, note). A program that
    cannot be decomposed is kept as exported, with the reason in the note."""
    # deferred: at the top this import closes a circle, and fails while the modules load
    from uol_core.graph.aten_rules import RULES
    from uol_core.graph.export_import import VIEW_OPS, packet

    table = torch.export.default_decompositions()
    for op in list(table.keys()):
        if packet(op) in RULES or packet(op) in VIEW_OPS or packet(op) in ("dropout", "feature_dropout"):
            table.pop(op)  # mapped whole: one ODL op beats its decomposition's several
    try:
        with warnings.catch_warnings():  # torch's own deprecations inside its pass, not the user's
            warnings.simplefilter("ignore", FutureWarning)
            program = program.run_decompositions(table)
    except Exception as err:  # the exported program stands; in-place nodes are handled one by one
        return program, f"not functionalised ({str(err).strip().splitlines()[0][:160]})"
    for n in program.graph_module.graph.nodes:  # the names users know, in notes and node names
        if n.op == "call_function" and packet(n.target) in FUNCTIONAL_NAMES and hasattr(n, "_rename"):
            n._rename(FUNCTIONAL_NAMES[packet(n.target)])
    return program, ""
