"""Operator graphs: load and validate JSON graphs, import torch modules, plan fusion, run end to end."""

from uol_core.graph.format import (
    Graph,
    GraphError,
    Node,
    TensorSpec,
    graph_from_dict,
    graph_to_dict,
)
from uol_core.graph.fusion import FusionPlan, plan_fusion
from uol_core.graph.load import load_graph, to_networkx, validate
from uol_core.graph.run import compile_graph, plan_graph, run_graph

__all__ = [
    "FusionPlan", "Graph", "GraphError", "Node", "TensorSpec", "compile_graph", "graph_from_dict",
    "graph_to_dict", "load_graph", "plan_fusion", "plan_graph", "run_graph", "to_networkx",
    "validate",
]
