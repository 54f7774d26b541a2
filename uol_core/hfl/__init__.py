"""HFL, the hardware feature library: target records (TOML, with provenance), host probe, roofline."""

from uol_core.hfl.loader import list_targets, load_file, load_target, target_name
from uol_core.hfl.schema import HflError, Provenance, Target

__all__ = ["HflError", "Provenance", "Target", "list_targets", "load_file", "load_target", "target_name"]
