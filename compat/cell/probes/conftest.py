"""Fixtures shared by the cell suites (compat/cell/probes/in_process, compat/cell/probes/server; they run in one pytest session in
the cell's venv): the speculators release installed there, its profile, and the tiny model."""

from __future__ import annotations

import importlib.metadata

import pytest

from compat.shared.profiles import Profile, profile_for


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
def model_dir() -> str:
    from compat.fixtures import tiny_llama

    return str(tiny_llama.from_env())
