"""The runtimes a user would otherwise deploy a model with ("peers"), each as a no-argument call
on fixed inputs, so that benchmarks and the IDE time and verify them the same way.

    peers = prepare_peers(module, inputs)            # {"eager": Peer, "compile": Peer, ...}
    reasons = verify_peers(peers, module(*inputs))   # {"onnxruntime": None, ...}: None = verified
    times = interleaved_times({n: p.call for n, p in peers.items() if p.call}, rounds,
                              PEER_LEAD_IN_S)  # runtime/turns.py

Peers: torch eager, torch.compile (inductor), ONNX Runtime (CPU execution provider, model from
`torch.onnx.export`) and OpenVINO (CPU, `openvino.convert_model` of the module), all in f32 with
intra-op threads = the cores this process may run on. A peer that is not installed or cannot
export or compile the model gets `call=None` and a one-line note; preparing never raises.
onnxruntime and openvino are the `[bench]` extra.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
from torch import nn

PEERS = ("eager", "compile", "onnxruntime", "openvino")
MISSING = "not installed (pip install -e '.[bench]')"


@dataclass
class Peer:
    """One runtime on one model and its inputs: `call()` runs it and returns the output as a
    torch tensor; `call` is None when it is not available here, and `note` says why (else it
    gives the runtime's version and settings)."""

    name: str
    call: Callable[[], torch.Tensor] | None
    note: str

    @property
    def ready(self) -> bool:
        return self.call is not None


def cores() -> int:
    """CPUs this process may run on (the affinity mask, not the machine's count: a container or
    taskset limits it, and a runtime given more threads than cores only contends with itself)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no affinity call on this OS
        return os.cpu_count() or 1


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:200] if text else ''}".rstrip(": ")


def _tensor(value) -> torch.Tensor:
    return value if isinstance(value, torch.Tensor) else torch.from_numpy(value)


def _eager(module: nn.Module, inputs: tuple[torch.Tensor, ...], threads: int) -> Peer:
    def call() -> torch.Tensor:
        with torch.no_grad():
            return module(*inputs)
    return Peer("eager", call, f"torch {torch.__version__}, {torch.get_num_threads()} threads")


def _compile(module: nn.Module, inputs: tuple[torch.Tensor, ...], threads: int) -> Peer:
    # run.py lives in the same package and owns the one way this project builds torch.compile
    from uol_core.graph.run import torch_compiled

    compiled, why = torch_compiled(module)
    if compiled is None:
        return Peer("compile", None, why or "torch.compile is not available")

    def call() -> torch.Tensor:
        with torch.no_grad():
            return compiled(*inputs)
    return Peer("compile", call, f"torch.compile (inductor), torch {torch.__version__}")


def _onnx_bytes(module: nn.Module, inputs: tuple[torch.Tensor, ...]) -> tuple[bytes, str]:
    """The module as an ONNX model in memory, and which exporter made it. The dynamo exporter
    (torch.export based, the default in torch >= 2.9) first; the TorchScript exporter where it
    fails, since some library models still trace but do not export."""
    errors = []
    log = logging.getLogger("torch.onnx")
    level = log.level
    log.setLevel(logging.ERROR)  # the exporter logs a warning per optional op it skips
    for dynamo in (True, False):
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")  # the exporters warn per op; the note says what matters
                if dynamo:
                    program = torch.onnx.export(module, inputs, dynamo=True, verbose=False,
                                                external_data=False)
                    return program.model_proto.SerializeToString(), "dynamo exporter"
                buffer = io.BytesIO()
                torch.onnx.export(module, inputs, buffer, dynamo=False, opset_version=17)
                return buffer.getvalue(), "TorchScript exporter"
        except Exception as err:  # (exporters raise anything; try the other)
            errors.append(f"{'dynamo' if dynamo else 'torchscript'}: {_first_line(err)}")
        finally:
            log.setLevel(level)
    raise RuntimeError("torch.onnx.export failed (" + "; ".join(errors) + ")")


def _onnxruntime(module: nn.Module, inputs: tuple[torch.Tensor, ...], threads: int) -> Peer:
    try:
        import onnxruntime as ort
    except ImportError:
        return Peer("onnxruntime", None, f"onnxruntime {MISSING}")
    model, exporter = _onnx_bytes(module, inputs)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.log_severity_level = 3  # errors only: the default prints per-node warnings
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    if len(names) != len(inputs):  # an exporter that dropped an unread input: say so, not guess
        raise RuntimeError(f"the ONNX model takes {len(names)} inputs, the module {len(inputs)}")
    feed = {n: x.detach().contiguous().numpy() for n, x in zip(names, inputs, strict=True)}
    first = session.get_outputs()[0].name

    def call() -> torch.Tensor:
        return torch.from_numpy(session.run([first], feed)[0])
    return Peer("onnxruntime", call, f"onnxruntime {ort.__version__}, CPUExecutionProvider, "
                f"{threads} intra-op threads, {exporter}")


def _openvino_summary(err: BaseException) -> str:
    """OpenVINO's conversion error in one line: its "Summary" (which operations failed), not
    the first line, which only names the C++ check that fired."""
    lines = [ln.strip("- ").strip() for ln in str(err).splitlines()]
    if "Summary:" in lines:
        return "; ".join(ln for ln in lines[lines.index("Summary:") + 1:] if ln)[:300]
    return _first_line(err)


def _openvino_model(ov, module: nn.Module, inputs: tuple[torch.Tensor, ...]):
    """The module as an OpenVINO model: `convert_model` of the module (TorchScript tracing,
    OpenVINO's documented path) first; where that fails, of its `torch.export` program (the
    TorchFX frontend), which converts models whose traced graph keeps ops it lacks."""
    errors = []
    for how in ("traced", "torch.export"):
        try:
            with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
                warnings.simplefilter("ignore")  # tracing warnings on every data-dependent branch
                if how == "traced":
                    example = inputs if len(inputs) > 1 else inputs[0]
                    return ov.convert_model(module, example_input=example), "traced"
                return ov.convert_model(torch.export.export(module, inputs)), "from torch.export"
        except Exception as err:  # (any frontend failure: try the other, then report both)
            errors.append(f"{how}: {_openvino_summary(err)}")
    raise RuntimeError("openvino.convert_model failed (" + " | ".join(errors) + ")")


def _openvino(module: nn.Module, inputs: tuple[torch.Tensor, ...], threads: int) -> Peer:
    try:
        import openvino as ov
    except ImportError:
        return Peer("openvino", None, f"openvino {MISSING}")
    model, frontend = _openvino_model(ov, module, inputs)
    core = ov.Core()
    # f32: without the hint OpenVINO runs bf16 on hosts that have it, a different contest
    compiled = core.compile_model(model, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                                 "INFERENCE_NUM_THREADS": threads})
    request = compiled.create_infer_request()
    feed = [x.detach().contiguous().numpy() for x in inputs]
    output = compiled.outputs[0]

    def call() -> torch.Tensor:
        # share_inputs: the inputs are fixed arrays; outputs are copied (the request reuses its buffer)
        result = request.infer(feed, share_inputs=True, share_outputs=False)
        return _tensor(result[output])
    return Peer("openvino", call, f"openvino {ov.get_version().split('-')[0]}, CPU, f32, "
                f"{threads} threads, {frontend}")


BUILDERS: dict[str, Callable[[nn.Module, tuple[torch.Tensor, ...], int], Peer]] = {
    "eager": _eager, "compile": _compile, "onnxruntime": _onnxruntime, "openvino": _openvino}


def prepare_peers(module: nn.Module, inputs: tuple[torch.Tensor, ...], peers: Iterable[str] = PEERS,
                  threads: int | None = None) -> dict[str, Peer]:
    """Each named peer ready to run `module` on `inputs` (exported, converted, compiled, and
    called once, so that a failure shows here and not in the first timed call). A peer that is
    unknown, not installed or fails gets `call=None` and a one-line note instead of raising."""
    module = module.eval()
    threads = threads or cores()
    out: dict[str, Peer] = {}
    for name in peers:
        builder = BUILDERS.get(name)
        if builder is None:
            out[name] = Peer(name, None, f"unknown peer (one of: {', '.join(PEERS)})")
            continue
        try:
            peer = builder(module, inputs, threads)
            if peer.call is not None:
                peer.call()  # the first call compiles (inductor) or allocates: fail or warm here
        except Exception as err:  # (any runtime's failure is a note, not a crash)
            peer = Peer(name, None, _first_line(err))
        out[name] = peer
    return out


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """max |got - expected| relative to the largest |expected| (the project's measure)."""
    got, expected = got.detach().double(), expected.detach().double()
    scale = expected.abs().max().item() if expected.numel() else 0.0
    diff = (got - expected).abs().max().item() if expected.numel() else 0.0
    return diff / scale if scale > 0 else diff


def verify_peers(peers: dict[str, Peer], expected: torch.Tensor, rtol: float = 1e-3,
                 atol: float = 1e-5) -> dict[str, str | None]:
    """For each peer: None when its output matches `expected` (max |error| <= atol + rtol *
    max |expected|), else why not (its max error, a shape mismatch, the error it raised, or the
    note of a peer that is not available). A peer that does not verify must not be timed as a
    winner."""
    reasons: dict[str, str | None] = {}
    scale = expected.detach().abs().max().item() if expected.numel() else 0.0
    for name, peer in peers.items():
        if peer.call is None:
            reasons[name] = f"not available: {peer.note}"
            continue
        try:
            got = _tensor(peer.call())
        except Exception as err:  # (a runtime failing on call is its reason)
            reasons[name] = f"failed: {_first_line(err)}"
            continue
        if tuple(got.shape) != tuple(expected.shape):
            reasons[name] = f"shape {tuple(got.shape)}, expected {tuple(expected.shape)}"
            continue
        diff = (got.detach().double() - expected.detach().double()).abs().max().item() \
            if expected.numel() else 0.0
        if not diff <= atol + rtol * scale:  # also catches NaN
            reasons[name] = f"max error {diff:.3g} ({relative_error(got, expected):.2g} relative)"
        else:
            reasons[name] = None
    return reasons


__all__ = ["PEERS", "Peer", "cores", "prepare_peers", "relative_error", "verify_peers"]
