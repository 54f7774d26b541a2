"""ODL, the operator description language: text -> checked, typed IR."""

from uol_core.odl.errors import OdlError
from uol_core.odl.parser import parse, parse_module

__all__ = ["OdlError", "parse", "parse_module"]
