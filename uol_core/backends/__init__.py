"""Backends: renderers from the operator IR to kernel source, one module per language."""
