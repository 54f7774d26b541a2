"""The machine a collective runs on: topologies (nodes, switches, NICs) and their link presets."""
