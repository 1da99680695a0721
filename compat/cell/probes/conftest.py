"""Fixtures shared by the cell suites (compat/cell/probes/in_process, compat/cell/probes/server; they run in one pytest
session in the cell's venv; the Kimi suite in its own): the cell spec the harness wrote, the speculators release
installed there, its profile, and the model."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest

from compat.shared.cell_spec import CellSpec, CellSpecError, spec_from_environment
from compat.shared.profiles import Profile, profile_for


@pytest.fixture(scope="session")
def cell_spec() -> CellSpec:
    """The cell's settings (compat.shared.cell_spec), read once from the file the harness names."""
    return spec_from_environment()


@pytest.fixture(scope="session")
def speculators_version() -> str:
    return importlib.metadata.version("speculators")


@pytest.fixture(scope="session")
def profile(speculators_version: str) -> Profile:
    return profile_for(speculators_version)


@pytest.fixture(scope="session")
def server_profile(profile: Profile, speculators_version: str) -> Profile:
    """The profile, for the server-era probes: the in-process releases skip them as n/a."""
    if profile.name != "server":
        pytest.skip(f"n/a: speculators {speculators_version} drives vLLM in-process ({profile.note})")
    return profile


@pytest.fixture(scope="session")
def model_dir(cell_spec: CellSpec) -> str:
    return checked_model_dir(cell_spec.model_dir)


def checked_model_dir(path: str) -> str:
    if not (Path(path) / "config.json").is_file():
        raise CellSpecError(f"the cell spec's model_dir {path} has no config.json; expected a model folder "
                            "such as the one `python -m compat.fixtures.tiny_llama` prints")
    return path
