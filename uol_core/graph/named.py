"""Zoo models by name: the hand-built blocks (`zoo.py`) and the library models (`hf_zoo.py`)
as one closed set of names, each built at a size and a batch and imported into a graph.

    from uol_core.graph.named import import_zoo_model
    graph, module, inputs = import_zoo_model("resnet50", size="small", batch=1)

The CLI (`uol graph run zoo:<name>`) and the IDE's Graph page name models only through this
set: a name that is not in it, a size or a batch that is not offered, is refused in one line.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib.util import find_spec

import torch
from torch import nn

from uol_core.graph.export_import import import_model
from uol_core.graph.format import Graph, GraphError
from uol_core.graph.hf_zoo import HF_MODELS, build
from uol_core.graph.zoo import MODELS
from uol_core.graph.zoo import build as build_block

SIZES = ("small", "bench")
BATCHES = (1, 8)
PREFIX = "zoo:"  # how the CLI names a zoo model where it otherwise takes a file or module:Class
UOL, TRANSFORMERS = "uol", "transformers"


@dataclass(frozen=True)
class ZooModel:
    """One model a user can pick by name."""

    name: str     # the closed set's key: "convnext_block", "resnet50"
    label: str    # what a user reads: "convnext_block (UOL zoo)", "ResNet-50 (transformers)"
    library: str  # UOL (hand-built from torch.nn) or TRANSFORMERS (Hugging Face)

    def unavailable(self) -> str | None:
        """Why this model cannot be built here (its library is missing), else None."""
        if self.library == TRANSFORMERS:
            # found, not imported: a server listing the zoo never loads transformers (seconds,
            # hundreds of MiB); a broken install is reported by the build, in one line
            return None if find_spec("transformers") else (
                "transformers is not installed (pip install -e '.[models]')")
        return None


def zoo_models() -> dict[str, ZooModel]:
    """Every zoo model by name: the hand-built blocks first, then the library models."""

    models = {name: ZooModel(name, f"{name} (UOL zoo)", UOL) for name in MODELS}
    for name, entry in HF_MODELS.items():
        # the two zoos share one namespace: a clash would make a name ambiguous
        assert name not in models, f"zoo name {name} is in both zoos"
        models[name] = ZooModel(name, f"{entry.family} (transformers)", TRANSFORMERS)
    return models


def _one_line(exc: BaseException, limit: int = 300) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text[:limit] + ("..." if len(text) > limit else "")


def check_zoo_request(name: object, size: object = "small", batch: object = 1) -> ZooModel:
    """The zoo model a request names, once name, size and batch are in their closed sets;
    GraphError in one line otherwise (the name is quoted short, never opened)."""
    models = zoo_models()
    if not isinstance(name, str) or name not in models:
        raise GraphError(f"no zoo model {str(name)[:80]!r}; choose one of {', '.join(models)}")
    if size not in SIZES:
        raise GraphError(f"zoo size {str(size)[:20]!r} is not one of {', '.join(SIZES)}")
    if isinstance(batch, bool) or batch not in BATCHES:
        raise GraphError(f"zoo batch {str(batch)[:20]!r} is not one of "
                         f"{', '.join(map(str, BATCHES))}")
    return models[name]


def build_zoo_model(name: str, size: str = "small", batch: int = 1
                    ) -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    """The module in eval mode with seeded weights and its seeded example inputs; a model that
    cannot be built here (its library missing, a config the library refuses) is one GraphError."""
    model = check_zoo_request(name, size, batch)
    reason = model.unavailable()
    if reason:
        raise GraphError(f"{model.label} cannot be built here: {reason}")
    try:
        if model.library == TRANSFORMERS:
            return build(name, size, int(batch))

        module, x = build_block(name, size, int(batch))
        return module, (x,)
    except Exception as exc:  # a library's own error, whatever its type: one line for the user
        raise GraphError(f"{model.label} cannot be built: {_one_line(exc)}") from None


def import_zoo_model(name: str, size: str = "small", batch: int = 1, method: str = "auto"
                     ) -> tuple[Graph, nn.Module, tuple[torch.Tensor, ...]]:
    """Build the model and import it (torch.export, torch.fx as the fallback): the graph, the
    module it came from and the example inputs it was imported on. Any failure of the export
    (dynamic shapes, data-dependent control flow, an unsupported dtype) is one GraphError."""

    module, inputs = build_zoo_model(name, size, batch)
    label = f"{name}_b{batch}" + ("_small" if size == "small" else "")
    try:
        graph = import_model(module, *inputs, name=label, method=method)
    except GraphError as exc:
        raise GraphError(f"{name} does not import: {_one_line(exc)}") from None
    except Exception as exc:  # torch's exporters raise many types; the user needs the line
        raise GraphError(f"{name} does not import: {type(exc).__name__}: {_one_line(exc)}") from None
    # runs of the graph (make_inputs) use the model's own inputs: random floats are no token ids
    for input_name, value in zip(graph.inputs, inputs, strict=False):
        if tuple(value.shape) == tuple(graph.inputs[input_name].shape):
            graph.values[input_name] = value
    return graph, module, inputs


def opaque_nodes(graph: Graph) -> list[dict]:
    """Nodes left in torch that are not views, each with its aten op and the reason."""
    return [{"node": n.name, "source": n.source, "reason": n.label.removeprefix("opaque: ")}
            for n in graph.nodes if n.kind == "torch" and n.label != "view"]


__all__ = ["BATCHES", "PREFIX", "SIZES", "ZooModel", "build_zoo_model", "check_zoo_request",
           "import_zoo_model", "opaque_nodes", "zoo_models"]
