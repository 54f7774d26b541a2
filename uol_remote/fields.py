"""The fields of a signed job that a worker reads, checked before anything runs.

A signature says who wrote a job, not that its values make sense: `timeout: NaN` made every
bound on it false (`nan > limit` is false), a string where a number belongs failed deep inside
a run, and `True` passed for 1. Each field the worker or its job runner reads as a number must
be a real, finite number of the right kind (an integer where a count is meant, never a bool)
inside its range; a job that breaks one is refused with a line naming the field. (Any NaN or
infinity anywhere in a signed body is already refused by `signing.open_sealed`.)
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

MAX_TIMEOUT_S = 3600.0  # the broker redelivers a job not acknowledged within an hour
MAX_SIZE = 1 << 40  # a dimension; the memory budget (check_memory) bounds the product
NONCE = re.compile(r"[A-Za-z0-9_-]{8,128}")
KINDS = ("kernel", "request", "profile", "gloo")


@dataclass(frozen=True)
class Number:
    """A numeric field: integer or real, and its inclusive range."""

    low: float
    high: float
    integer: bool = False

    def problem(self, value, where: str) -> str | None:
        kind = "an integer" if self.integer else "a number"
        if isinstance(value, bool) or not isinstance(value, (int, float)) or (
                self.integer and not isinstance(value, int)):
            return f"{where} must be {kind}, got {_shown(value)}"
        if not math.isfinite(value):
            return f"{where} must be a finite number, got {value!r}"
        if not self.low <= value <= self.high:
            return f"{where} = {value!r} is outside {self.low:g}..{self.high:g}"
        return None


def _shown(value) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


TIMEOUT = Number(0.001, MAX_TIMEOUT_S)
SIZE = Number(1, MAX_SIZE, integer=True)
# the numbers each kind's runner reads from its job (uol_core.runtime.worker.make_job and
# make_race; the Profiler's request; the gloo request, whose range the gloo runner checks
# itself and names in its own error)
JOB_NUMBERS = {
    "kernel": {"seed": Number(0, 2**63 - 1, integer=True),
               "warmup": Number(0, 10_000, integer=True),
               "repeats": Number(1, 100_000, integer=True),
               "min_seconds": Number(0, 600), "seconds": Number(0, 600),
               "rounds": Number(1, 10_000, integer=True)},
    "request": {},
    "profile": {"repeats": Number(1, 1000, integer=True)},
    "gloo": {"ranks": Number(-2**31, 2**31, integer=True)},
}
JOB_FLAGS = {"kernel": ("check_only",)}


def field_problem(body: dict) -> str | None:
    """Why the opened (signature-checked) job `body` cannot run, or None when its fields hold."""
    nonce = body.get("nonce")
    if not isinstance(nonce, str) or not NONCE.fullmatch(nonce):
        return f"job nonce {_shown(nonce)} is not 8-128 letters, digits, '_' or '-'"
    kind = body.get("kind")
    if kind not in KINDS:
        return f"unknown job kind {_shown(kind)} (one of {', '.join(KINDS)})"
    if body.get("timeout") is not None:
        problem = TIMEOUT.problem(body["timeout"], "timeout")
        if problem:
            return problem
    isa = body.get("isa") or []
    if not isinstance(isa, list) or not all(isinstance(flag, str) for flag in isa):
        return f"isa must be a list of ISA flag names, got {_shown(isa)}"
    job = body.get("job")
    if not isinstance(job, dict):
        return f"the job must be an object, got {_shown(job)}"
    for name, number in JOB_NUMBERS[kind].items():
        if name in job:
            problem = number.problem(job[name], f"job.{name}")
            if problem:
                return problem
    for name in JOB_FLAGS.get(kind, ()):
        if name in job and not isinstance(job[name], bool):
            return f"job.{name} must be true or false, got {_shown(job[name])}"
    sizes = job.get("sizes", {})
    if not isinstance(sizes, dict):
        return f"job.sizes must map size names to integers, got {_shown(sizes)}"
    for name, value in sizes.items():
        problem = SIZE.problem(value, f"job.sizes.{name}")
        if problem:
            return problem
    return None
