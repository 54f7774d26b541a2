"""Python-side flame trees from pyinstrument: profile a call, a compiler stage or a whole command."""

from __future__ import annotations

import contextlib
import io
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyinstrument import Profiler
from pyinstrument.renderers import HTMLRenderer, JSONRenderer
from pyinstrument.session import Session

from profilers.flame import FlameNode

# The compiler stages `profile_stage` knows, in pipeline order.
STAGES = ("parse", "classify", "reference", "solve", "emit", "compile", "run", "tune")


@dataclass
class Profile:
    """A pyinstrument session, its flame tree and what was profiled."""

    tree: FlameNode
    session: Session
    label: str
    result: Any = None

    def html(self) -> str:
        """pyinstrument's own interactive HTML page (its JS is inlined, so it opens offline)."""
        return HTMLRenderer().render(self.session)

    def save_html(self, path: str | Path) -> Path:
        """Write `html()` to a file."""
        path = Path(path)
        path.write_text(self.html(), encoding="utf-8")
        return path


def tree_from_session(session: Session, label: str = "") -> FlameNode:
    """The UOL flame tree of a pyinstrument session (importlib and profiler frames removed)."""
    frame = session.root_frame()
    root = FlameNode(label or session.target_description or "profile", unit="seconds",
                     meta={"duration": session.duration, "samples": session.sample_count,
                           "cpu_time": session.cpu_time})
    if frame is None:
        return root
    # the same processor chain as pyinstrument's JSON view, so the tree matches what users see
    frame = JSONRenderer().preprocess(frame)
    if frame is None:
        return root
    node = _convert(frame)
    # drop the profiler's own wrapper frames so the tree starts at the profiled code
    while node.file.endswith("pyinstrument_source.py") and len(node.children) == 1:
        node = node.children[0]
    root.children.append(node)
    return root.fix_totals()


def _convert(frame) -> FlameNode:
    node = FlameNode(frame.function or "?", frame.file_path_short or "", frame.line_no or 0,
                     float(frame.total_self_time), float(frame.time), unit="seconds",
                     meta={"app": bool(frame.is_application_code)})
    node.children = [_convert(c) for c in frame.children if not c.is_synthetic]
    return node


def profile_call(fn: Callable[..., Any], *args: Any, label: str = "", interval: float = 0.001,
                 **kwargs: Any) -> Profile:
    """Run `fn(*args, **kwargs)` under pyinstrument; the result is kept in `Profile.result`."""
    profiler = Profiler(interval=interval)
    profiler.start()
    try:
        result = fn(*args, **kwargs)
    finally:
        session = profiler.stop()
    name = label or getattr(fn, "__name__", "call")
    return Profile(tree_from_session(session, name), session, name, result)


def profile_command(run: Callable[[list[str]], Any], argv: list[str],
                    interval: float = 0.001) -> Profile:
    """Profile one CLI invocation `run(argv)`; its stdout is captured, SystemExit is absorbed.

    The caller passes the CLI runner so that profilers never import the CLI package.
    """
    out = io.StringIO()

    def call() -> Any:
        with contextlib.redirect_stdout(out):
            try:
                return run(argv)
            except SystemExit as stop:  # typer exits; the profile is still wanted
                return stop.code
    prof = profile_call(call, label="uol " + " ".join(argv), interval=interval)
    prof.result = {"exit": prof.result, "stdout": out.getvalue()}
    return prof


def stage_runner(stage: str, op_spec: str, sizes: Mapping[str, int], target: str = "host",
                 config: dict | str | None = None) -> Callable[[], Any]:
    """A zero-argument callable that runs one compiler stage (inputs prepared outside it)."""
    if stage not in STAGES:
        raise ValueError(f"unknown stage '{stage}'; known: {', '.join(STAGES)}")
    text = op_spec_text(op_spec)
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    import uol_core

    if stage == "parse":
        return lambda: uol_core.parse(text)
    op = uol_core.parse(text)
    if stage == "classify":
        return lambda: uol_core.classify(op)
    if stage == "reference":
        # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
        from uol_core.runtime.inputs import random_inputs
        inputs = random_inputs(op, sizes)
        return lambda: uol_core.evaluate(op, **inputs)
    compile_fn = _compile_api()
    if stage in ("solve", "emit"):
        # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
        from uol_core.acg.config import resolve_target
        from uol_core.api import choose_config
        from uol_core.backends.c import emit
        from uol_core.backends.c.gemm.space import build_space
        from uol_core.plans.gemm import lower_contraction

        tgt = resolve_target(target)
        if stage == "solve":
            return lambda: build_space(lower_contraction(op, dict(sizes)), tgt)
        cfg = choose_config(op, dict(sizes), tgt, config)[0]
        return lambda: emit(op, cfg, tgt, dict(sizes))
    if stage == "compile":
        return lambda: compile_fn(op, shapes=dict(sizes), target=target, config=config)
    if stage == "tune":
        return lambda: compile_fn(op, shapes=dict(sizes), target=target, config="tuned")
    kernel = compile_fn(op, shapes=dict(sizes), target=target, config=config)
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    from uol_core.runtime.inputs import random_inputs
    inputs = random_inputs(op, sizes)
    return lambda: kernel(**inputs)


def profile_stage(stage: str, op_spec: str, sizes: Mapping[str, int], target: str = "host",
                  config: dict | str | None = None, repeat: int = 1) -> Profile:
    """Profile one stage (parse, classify, reference, solve, emit, compile, run, tune) of an op."""
    run = stage_runner(stage, op_spec, sizes, target, config)

    def repeated() -> Any:
        result = None
        for _ in range(max(1, repeat)):
            result = run()
        return result
    return profile_call(repeated, label=f"{stage} {spec_label(op_spec)}")


def op_spec_text(op_spec: str) -> str:
    """The ODL text an op spec stands for: the spec itself when it is ODL text, else the library
    operator of that name. Never a path: the IDE and remote workers pass specs a client chose,
    so a file is read only by the CLI (`uol_cli.common.read_op`), which passes on its text."""
    if "\n" in op_spec or "->" in op_spec:  # ODL text itself (a user's op, not in the library)
        return op_spec
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    from uol_core.ops import op_text
    return op_text(op_spec)


def spec_label(op_spec: str) -> str:
    """A short name for an op spec: the library name, or the op's name in its text."""
    match = re.search(r"^\s*op\s+(\w+)", op_spec, re.MULTILINE)
    return match.group(1) if match else op_spec[:40]


def _compile_api() -> Callable[..., Any]:
    # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
    import uol_core
    compile_fn = getattr(uol_core, "compile", None)
    if compile_fn is None:
        try:
            # deferred: at the top it would load uol_core, and torch with it, whenever this module loads
            from uol_core.api import compile as compile_fn  # type: ignore[no-redef]
        except ImportError:
            raise RuntimeError("uol_core.compile is not available in this build") from None
    return compile_fn
