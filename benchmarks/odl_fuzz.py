"""Mutation fuzzer for ODL: every mutated text gives a kernel or an OdlError / ShapeError.

Run: `.venv/bin/python benchmarks/odl_fuzz.py [--count 50000] [--seed 0] [--compile-every N]
[--json PATH]`. Each text is a library operator (or a seed below) with one to three mutations:
slices deleted, duplicated or replaced by ODL tokens, lines swapped, numbers replaced by
extreme ones (2**64 + 5, 1e999), names by non-ASCII ones (A², é), shapes shifted (N - 999),
reads wrapped in pad(), element types changed, stray characters (NUL, ², U+2028), index
coefficients and offsets made large or negative (near 2**62 and 2**63, where int64 ends), an
input widened along one axis (a reduction then runs over more than the output's width), and
reductions given written extents (a prefix of the axis they read). A text that
parses then goes through every stage a user's text reaches without running native code:
printed and parsed back to the same IR, sizes bound (each dimension 1 to 6), a C kernel
emitted by the router the backend uses, and the reference evaluator run on random inputs.
With --compile-every N, every Nth kernel is also built with gcc, run and verified against the
reference in a child process (a crash, a hang or a wrong value counts as a failure).

Anything but OdlError / ShapeError is a failure, listed with the text that caused it; the exit
status is 1 when there is one. The pytest suites run the same engine with fewer texts
(tests/test_odl_fuzz.py; tests/reliability/test_odl_mutations.py, 50,000 with UOL_LONG=1).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from uol_core.odl import OdlError, parse  # noqa: E402
from uol_core.odl.errors import IndexOverflowError  # noqa: E402
from uol_core.odl.printer import format_op  # noqa: E402
from uol_core.odl.shapes import ShapeError  # noqa: E402
from uol_core.ops import list_ops, op_text  # noqa: E402

EXPECTED = (OdlError, ShapeError)
SEEDS = [
    "op conv_pad(X: f32[N, C, H, W], F: f32[K, C, 3, 3]) -> Y: f32[N, K, H, W]:\n"
    "    Y[n, k, h, w] = sum[c, r, s](pad(X[n, c, h + r - 1, w + s - 1], 0) * F[k, c, r, s])\n",
    "op mm_pad(A: f32[M, K], B: f32[K, N], b: f32[N]) -> C: f32[M, N]:\n"
    "    C[m, n] = relu(sum[k](pad(A[m, k - 1], 0) * B[k, n]) + pad(b[n + 1], 0.5))\n",
    "op ints(X: i32[N], B: i8[N]) -> (Y: i32[N], Z: f32[N]):\n"
    "    Y[i] = X[i] * 3 + where(B[i] > 0, 1, 0)\n    Z[i] = f32(Y[i]) / 7\n",
    "op scan_pad(X: f32[N]) -> Y: f32[N]:\n    Y[i] = cumsum[i](pad(X[i - 2], 1))\n",
    "op half(X: f16[R, C]) -> Y: f16[R]:\n    Y[r] = max[c](X[r, c]) + 2\n",
]
TOKENS = ["X", "Y", "A", "n", "k", "i", "N", "M", "K", "sum", "max", "mean", "cumsum", "pad",
          "where", "exp", "f32", "i8", "i32", "bool", "op", "and", "not", "(", ")", "[", "]", ",",
          ":", "+", "-", "*", "/", "**", "<", "<=", "==", "=", "->", "0", "1", "0.5", "1e-6",
          "-1e30", "\n", "    ", "#"]
NUMBERS = ["18446744073709551621", "9223372036854775808", "2147483648", "128", "1e999",
           "-1e999", "0", "0.0", "65505", "99999999999999999999999", "1e308", "3.5e38", "1e-999"]
NAMES = ["A²", "é", "x\u0661", "ǅ", "_", "__", "op", "sum", "f32", "i", "N", "t_X", "D_N",
         "uol_micro", "main", "int", "float", "restrict"]
CHARS = ["\x00", "²", "\u2028", "\t", "\r", "\x0c", "é", "∑", "\ufeff", "$", "@", ";", "{", "\\"]
DTYPES = ["f32", "f16", "bf16", "f64", "i32", "i8", "bool"]
SHAPE_SHIFTS = [" - 999", " - 1", " + 1", " * 2", " - N"]
# Index coefficients and offsets around the ends of int32 and int64 (2**62 is the largest
# number an index form may hold; 2**62 * i overflows int64 from i = 2 on).
COEFFICIENTS = ["4611686018427387904", "-4611686018427387904", "4611686018427387903",
                "2305843009213693953", "3037000500", "9223372036854775807", "2147483648",
                "1073741824", "-1073741824", "4294967297", "1000000007", "-7", "0"]
OFFSETS = ["4611686018427387904", "-4611686018427387904", "9223372036854775807", "2147483647",
           "-2147483648", "999", "-1", "1"]
WIDENINGS = [" + 1", " + 3", " + 999", " * 2"]
REDUCERS = {"sum", "max", "min", "mean", "prod", "cumsum", "cumprod", "cummax"}


def mutate(text: str, rng: random.Random) -> str:
    """One random mutation of `text`."""
    n = len(text)
    i = rng.randint(0, n)
    j = rng.randint(i, min(n, i + 12))
    kind = rng.randrange(13)
    if kind == 0:
        return text[:i] + text[j:]
    if kind == 1:
        return text[:j] + text[i:j] + text[j:]
    if kind == 2:
        return text[:i] + " ".join(rng.choice(TOKENS) for _ in range(rng.randint(1, 3))) + text[j:]
    if kind == 3:
        lines = text.split("\n")
        a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[a], lines[b] = lines[b], lines[a]
        return "\n".join(lines)
    if kind == 4:
        return _replace_token(text, rng, str.isdigit, NUMBERS)
    if kind == 5:
        return _replace_token(text, rng, str.isidentifier, NAMES)
    if kind in _STRUCTURED:
        return _STRUCTURED[kind](text, rng)
    return text[:i] + rng.choice(CHARS) + text[i:]


def _shift_a_shape(text: str, rng: random.Random) -> str:
    """The first extent of a declared shape shifted (N - 999, 2*N, N - N)."""
    spots = [p for p, ch in enumerate(text) if ch == "]" and "f" in text[max(0, p - 30):p]]
    if not spots:
        return text
    p = rng.choice(spots)
    start = text.rfind("[", 0, p) + 1
    first = text[start:p].split(",")[0]
    return text[:start] + first + rng.choice(SHAPE_SHIFTS) + text[start + len(first):]


def _pad_a_read(text: str, rng: random.Random) -> str:
    """A read (or anything written NAME[...]) wrapped in pad() with an extreme fill."""
    spots = [p for p in range(1, len(text)) if text[p] == "[" and text[p - 1].isalpha()]
    if not spots:
        return text
    p = rng.choice(spots)
    name_start = p
    while name_start > 0 and (text[name_start - 1].isalnum() or text[name_start - 1] == "_"):
        name_start -= 1
    end = text.find("]", p)
    if end <= 0:
        return text
    fill = rng.choice(["0", "-1e30", "1", "300", "18446744073709551621"])
    return text[:name_start] + f"pad({text[name_start:end + 1]}, {fill})" + text[end + 1:]


def _change_a_dtype(text: str, rng: random.Random) -> str:
    present = [d for d in DTYPES if d + "[" in text]
    if not present:
        return text
    return text.replace(rng.choice(present) + "[", rng.choice(DTYPES) + "[", 1)


def _statement_spans(text: str) -> list[tuple[int, int]]:
    """(start, end) of the right side of each indented statement line: reads and reductions."""
    spans, start = [], 0
    for line in text.split("\n"):
        if line.startswith("    ") and "=" in line:
            spans.append((start + line.index("=") + 1, start + len(line)))
        start += len(line) + 1
    return spans


def _scale_an_index(text: str, rng: random.Random) -> str:
    """One index of one read becomes `coefficient * index + offset` (large, negative, near
    the ends of int32 and int64), the read mostly wrapped in pad() so that it stays legal."""
    reads = [(_name_start(text, p), p, text.find("]", p))
             for a, b in _statement_spans(text) for p in range(a + 1, b)
             if text[p] == "[" and _name_start(text, p) < p and text.find("]", p) > 0]
    reads = [(n, p, e) for n, p, e in reads if text[n:p] not in REDUCERS and e < len(text)]
    if not reads:
        return text
    name_start, start, end = rng.choice(reads)
    parts = text[start + 1:end].split(",")
    axis = rng.randrange(len(parts))
    index = parts[axis].strip()
    form = rng.choice([f"{rng.choice(COEFFICIENTS)} * {index}",
                       f"{rng.choice(COEFFICIENTS)} * {index} + {rng.choice(OFFSETS)}",
                       f"{index} + {rng.choice(OFFSETS)}", f"{rng.choice(OFFSETS)} - {index}"])
    parts[axis] = (" " if axis else "") + form
    read = f"{text[name_start:start]}[{','.join(parts)}]"
    if rng.random() < 0.7 and not text[:name_start].endswith("pad("):
        read = f"pad({read}, {rng.choice(['0', '1', '-1e30'])})"
    return text[:name_start] + read + text[end + 1:]


def _name_start(text: str, bracket: int) -> int:
    """Where the name written just before text[bracket] starts (== bracket when none)."""
    start = bracket
    while start > 0 and (text[start - 1].isalnum() or text[start - 1] == "_"):
        start -= 1
    return start


def _widen_an_input(text: str, rng: random.Random) -> str:
    """One axis of one input declared wider than the others say: a reduction over it then
    runs over the input's whole axis, wider than the output (or the text is an OdlError)."""
    head_end = text.find("->")
    spots = [p for p in range(text.find("(") + 1, max(head_end, 0))
             if text[p] in ",]" and text.rfind("[", 0, p) > text.rfind("]", 0, p)]
    if not spots:
        return text
    p = rng.choice(spots)
    return text[:p] + rng.choice(WIDENINGS) + text[p:]


def _write_a_reduction_extent(text: str, rng: random.Random) -> str:
    """A reduction's index given a written extent (`sum[c: C - 1]`): it reads a prefix."""
    head = text[:text.find("->")] if "->" in text else ""
    dims = sorted({w for w in head.replace("[", " ").replace("]", " ").replace(",", " ").split()
                   if w.isidentifier() and w.isupper()})
    spots = [p for a, b in _statement_spans(text) for p in range(a, b)
             if text.startswith(("sum[", "max[", "min[", "mean[", "prod["), p)]
    if not spots or not dims:
        return text
    p = text.find("[", rng.choice(spots))
    end = text.find("]", p)
    names = text[p + 1:end].split(",")
    axis = rng.randrange(len(names))
    if ":" in names[axis]:
        return text
    names[axis] += f": {rng.choice(dims)}{rng.choice(['', ' - 1', ' + 1', ''])}"
    return text[:p + 1] + ",".join(names) + text[end:]


# mutation kind -> the function that makes it (kinds 0 to 5 and 9 are written inline)
_STRUCTURED = {6: _shift_a_shape, 7: _pad_a_read, 8: _change_a_dtype, 10: _scale_an_index,
               11: _widen_an_input, 12: _write_a_reduction_extent}


def _replace_token(text: str, rng: random.Random, kind, pool: list[str]) -> str:
    words = []
    start = None
    for p, ch in enumerate(text + " "):
        inside = ch.isalnum() or ch == "_"
        if inside and start is None:
            start = p
        elif not inside and start is not None:
            if kind(text[start:p]):
                words.append((start, p))
            start = None
    if not words:
        return text
    a, b = rng.choice(words)
    return text[:a] + rng.choice(pool) + text[b:]


def mutants(count: int, seed: int = 0):
    """`count` mutated ODL texts, reproducible from `seed`."""
    rng = random.Random(seed)
    sources = [op_text(name) for name in list_ops()] + SEEDS
    for _ in range(count):
        text = rng.choice(sources)
        for _ in range(rng.randint(1, 3)):
            text = mutate(text, rng)
        yield text


@dataclass
class FuzzReport:
    """Counts per outcome and the failures (an unexpected exception, with its text)."""

    texts: int = 0
    outcomes: Counter = field(default_factory=Counter)
    failures: list[dict] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict:
        return {"texts": self.texts, "outcomes": dict(self.outcomes), "seconds": round(self.seconds, 1),
                "failures": self.failures[:50], "failure_count": len(self.failures)}


def check_text(text: str, rng: random.Random, build: bool = False, builder=None) -> str:
    """The outcome of one text ('odl-error', 'overflow-error', 'shape-error', 'kernel',
    'built'); raises on a bug."""
    try:
        op = parse(text)
    except OdlError:
        return "odl-error"
    again = parse(format_op(op))
    if again != op:
        raise AssertionError(f"printing and parsing back changed the IR of {op.name}")
    sizes = {dim: rng.randint(1, 6) for dim in op.dims}
    try:
        return _lower_and_evaluate(op, sizes, build, builder)
    except IndexOverflowError:  # an OdlError (line, column) that depends on the sizes
        return "overflow-error"
    except ShapeError:
        return "shape-error"
    except OdlError:
        return "odl-error"


def _lower_and_evaluate(op, sizes: dict, build: bool, builder) -> str:
    from uol_core.acg.fixtures import fixed_target
    from uol_core.api import check_memory
    from uol_core.backends.c.route import emit_any
    from uol_core.odl.shapes import check_sizes
    from uol_core.runtime.inputs import random_inputs
    from uol_core.runtime.reference import evaluate_all

    check_sizes(op, sizes)
    check_memory(op, sizes)
    emit_any(op, sizes, fixed_target(), {"threads": 2})
    evaluate_all(op, random_inputs(op, sizes, seed=1))
    if not build:
        return "kernel"
    problem = builder.check(format_op(op), sizes)
    if problem:
        raise AssertionError(f"built kernel: {problem}")
    return "built"


class BuildChild:
    """A child process that builds, runs and verifies kernels: a crash or a hang of native
    code ends the child (reported, then a fresh one starts), never the fuzzer."""

    def __init__(self, timeout_s: float = 120.0):
        self.timeout_s = timeout_s
        self._start()

    def _start(self) -> None:
        ctx = multiprocessing.get_context("spawn")
        self.conn, child_end = ctx.Pipe()
        self.proc = ctx.Process(target=_build_loop, args=(child_end,), daemon=True)
        self.proc.start()
        child_end.close()

    def check(self, text: str, sizes: dict) -> str | None:
        """None when the kernel matches the reference, else what went wrong."""
        self.conn.send((text, sizes))
        if not self.conn.poll(self.timeout_s):
            self.close()
            self._start()
            return f"no result within {self.timeout_s:.0f} s"
        try:
            return self.conn.recv()
        except EOFError:
            self.proc.join(5)
            code = self.proc.exitcode
            self._start()
            return f"the kernel's process died (exit code {code})"

    def close(self) -> None:
        self.proc.kill()
        self.proc.join(5)


def _build_loop(conn) -> None:
    from uol_core.acg.fixtures import fixed_target
    from uol_core.backends.c.native import compile_c
    from uol_core.runtime.inputs import random_inputs
    from uol_core.runtime.reference import evaluate_all
    from uol_core.runtime.verify import compare

    while True:
        try:
            text, sizes = conn.recv()
        except EOFError:
            return
        try:
            op = parse(text)
            kernel = compile_c(op, sizes, fixed_target(), {"threads": 2})
            inputs = random_inputs(op, kernel.sizes, seed=5)
            out, ref = (_as_numbers(d) for d in (kernel.run(inputs), evaluate_all(op, inputs)))
            verdict = compare(out, ref, int(kernel.src.meta.get("reduction_length", 1)))
            # The fuzzer hunts crashes and garbage: an error below 1e-4 of the largest value is
            # summation order (huge pad values such as -1e30 cancel differently), not a bug.
            scale = max((float(t.abs().max()) for t in ref.values() if t.numel()), default=0.0)
            close = verdict.max_abs_err <= 1e-4 * max(scale, 1.0)
            answer = None if verdict.ok or close else (
                f"{kernel.src.meta.get('generator')}: wrong result at {verdict.where} "
                f"(max abs err {verdict.max_abs_err:.3g})")
        except EXPECTED:
            answer = None
        except Exception as err:  # reported to the parent as a failure
            answer = f"{type(err).__name__}: {err}"
        conn.send(answer)


def _as_numbers(tensors: dict) -> dict:
    """bool outputs as 0/1 floats (the comparison takes numbers)."""
    import torch
    return {k: t.double() if t.dtype == torch.bool else t for k, t in tensors.items()}


def run(count: int, seed: int = 0, compile_every: int = 0, progress: bool = False) -> FuzzReport:
    """Fuzz `count` texts; every `compile_every`-th kernel is also built and verified."""
    report = FuzzReport()
    rng = random.Random(seed + 1)
    builder = BuildChild() if compile_every else None
    start = time.perf_counter()
    kernels = 0
    try:
        for text in mutants(count, seed):
            report.texts += 1
            build = bool(compile_every) and kernels % compile_every == compile_every - 1
            try:
                outcome = check_text(text, rng, build, builder)
            except Exception as err:  # the bug this fuzzer looks for: keep the text
                outcome = "failure"
                report.failures.append({"text": text, "error": f"{type(err).__name__}: {err}",
                                        "trace": traceback.format_exc(limit=4)})
            kernels += outcome in ("kernel", "built")
            report.outcomes[outcome] += 1
            if progress and report.texts % 5000 == 0:
                print(f"{report.texts} texts, {dict(report.outcomes)}", file=sys.stderr)
    finally:
        if builder is not None:
            builder.close()
    report.seconds = time.perf_counter() - start
    return report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--compile-every", type=int, default=0,
                        help="build, verify and run every Nth kernel in the worker (0: never)")
    parser.add_argument("--json", type=Path, help="write the report as JSON here")
    args = parser.parse_args()
    report = run(args.count, args.seed, args.compile_every, progress=True)
    data = report.to_dict()
    if args.json:
        args.json.write_text(json.dumps(data, indent=1))
    print(json.dumps({k: v for k, v in data.items() if k != "failures"}, indent=1))
    for failure in report.failures[:10]:
        print(f"--- {failure['error']}\n{failure['text']}")
    return 1 if report.failures else 0


if __name__ == "__main__":
    sys.exit(main())
