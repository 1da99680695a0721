"""The probe modules these tests import carry the cell plugin's markers: registered here as the plugin does."""

from compat.cell.pytest_plugin import register_markers


def pytest_configure(config):
    register_markers(config)
