"""Docstring examples are part of the documentation: they must run."""

import doctest
import importlib

import pytest

MODULES = ["uol_core", "uol_core.odl.builder"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples_run(name):
    result = doctest.testmod(importlib.import_module(name))
    assert result.attempted > 0 and result.failed == 0
