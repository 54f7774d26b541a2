"""Shared pytest options."""


def pytest_addoption(parser):
    parser.addoption("--update-golden", action="store_true", default=False,
                     help="rewrite golden files (tests/golden/) from the current output")
