"""Graph page (placeholder until the graph issue): operator graphs as a layered DAG."""

import dash

from app.pages._placeholder import placeholder

dash.register_page(__name__, path="/graph", name="Graph", title="UOL Studio: Graph", order=1)

layout = placeholder("Operator graph", [
    "operator graphs (MLP, transformer block, attention, conv block in sample_graphs/) as a "
    "layered DAG, with per-node time and fusion groups",
    "the kernel each node compiles to; click a node to open it in the Studio",
], [("uol ops list", "the operator library"),
    ("uol compile OP --shapes M=256,N=256,K=256", "compile one node's operator"),
    ("uol profile report OP", "a report for one operator")])
