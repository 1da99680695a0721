"""Fixtures of the server-era probes (see compat/cell/server_mode_runs.py for what a mode's run does)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compat.cell import extraction
from compat.cell.server_mode_runs import Extraction


@pytest.fixture(scope="session")
def num_layers(model_dir: str) -> int:
    return json.loads(Path(model_dir, "config.json").read_text())["num_hidden_layers"]


@pytest.fixture(scope="session")
def extraction_runs(server_profile, model_dir, num_layers, speculators_version, cell_spec) -> Extraction:
    return Extraction(model_dir, speculators_version, extraction.layer_ids(num_layers), cell_spec)


@pytest.fixture(scope="session")
def reference_model(model_dir):
    from compat.cell.reference import load_reference_model

    return load_reference_model(model_dir)
