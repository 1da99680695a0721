"""Fixtures of the server-era probes (see server_run.py for what a mode's run does)."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path

import pytest

from compat.cell import extraction
from compat.shared.profiles import Profile, profile_for
from server_run import Extraction


@pytest.fixture(scope="session")
def speculators_version() -> str:
    return importlib.metadata.version("speculators")


@pytest.fixture(scope="session")
def server_profile(speculators_version: str) -> Profile:
    profile = profile_for(speculators_version)
    if profile.name != "server":
        pytest.skip(f"n/a: speculators {speculators_version} drives vLLM in-process ({profile.note})")
    return profile


@pytest.fixture(scope="session")
def model_dir() -> str:
    from fixtures import tiny_llama

    return str(tiny_llama.from_env())


@pytest.fixture(scope="session")
def num_layers(model_dir: str) -> int:
    return json.loads(Path(model_dir, "config.json").read_text())["num_hidden_layers"]


@pytest.fixture(scope="session")
def extraction_runs(server_profile, model_dir, num_layers, speculators_version) -> Extraction:
    return Extraction(model_dir, speculators_version, extraction.layer_ids(num_layers))


@pytest.fixture(scope="session")
def reference_model(model_dir):
    from compat.cell.reference import load_reference_model

    return load_reference_model(model_dir)
