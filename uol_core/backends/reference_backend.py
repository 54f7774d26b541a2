"""The reference backend's row of the registry: the torch evaluator of the IR, no knobs.

It is what every kernel is verified against, and what runs an op no other backend takes."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from uol_core.backends.base import KernelSource, into_given
from uol_core.backends.contract import Choice, Plan

VERSION = "reference-1"


class ReferenceKernel:
    """The evaluator bound to one op: outputs by name (written into `out` when given)."""

    timing_note = "the reference evaluator: not a kernel to time"

    def __init__(self, source: KernelSource, op: Any) -> None:
        self.source, self.op = source, op

    def run_with(self, tensors: Mapping, out: Any = None) -> dict:
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.runtime.reference import evaluate_all

        outs = evaluate_all(self.op, dict(tensors))
        outs = {d.name: outs[d.name] for d in self.op.outputs}
        return into_given(outs, out, self.source)


class ReferenceBackend:
    """Evaluates the IR with torch operations, statement by statement."""

    name = "reference"
    lang = "odl"
    label = "Reference (torch evaluator)"  # how user interfaces name it

    def plan(self, op: Any, sizes: Mapping[str, int], target: Any) -> Plan:
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.acg.config import resolve_target
        from uol_core.odl.patterns import classify

        return Plan(op, dict(sizes), resolve_target(target), classify(op).kind)

    def space(self, op: Any, sizes: Mapping[str, int], target: Any):
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.acg.space_core import Config, Space

        return Space({}, [], [Config()], notes=["the reference evaluator has no knobs"])

    def choose(self, plan: Plan, request: Any = None) -> Choice:
        return Choice({}, self.space(plan.op, plan.sizes, plan.target))

    def emit(self, plan: Plan, config: Any) -> KernelSource:
        """The 'source' is the ODL itself: the evaluator runs the IR, line for line."""
        # loaded when asked for: importing the registry row stays cheap
        from uol_core.odl.printer import format_op

        text = plan.op.source or format_op(plan.op)
        lines = {i: i for i in range(1, text.count("\n") + 2)}
        meta = {"inputs": [d.name for d in plan.op.inputs],
                "outputs": [d.name for d in plan.op.outputs], "generator": VERSION}
        return KernelSource(text, "odl", "evaluate", plan.op.name, {}, lines, meta)

    def load(self, source: KernelSource, plan: Plan) -> ReferenceKernel:
        return ReferenceKernel(source, plan.op)

    def hash(self) -> str:
        return VERSION
