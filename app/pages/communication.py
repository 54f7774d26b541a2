"""Communication page (placeholder until the HCF issue): collectives on cluster topologies."""

import dash

from app.pages._placeholder import placeholder

dash.register_page(__name__, path="/communication", name="Communication",
                   title="UOL Studio: Communication", order=4)

layout = placeholder("Communication (HCF)", [
    "topologies (fat-tree, torus, dragonfly, NVLink islands) with per-link load",
    "collective algorithms side by side (ring, tree, halving-doubling, hierarchical)",
    "overlap and pipeline Gantt charts, compression and fault scenarios",
], [("uol hcf topology", "describe a topology"),
    ("uol hcf simulate", "simulate a collective"),
    ("uol hcf sweep", "sweep message sizes"),
    ("uol hcf pipeline", "pipeline schedules (GPipe, 1F1B, interleaved)")])
