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


@pytest.fixture(scope="session", autouse=True)
def raw_run_started_early(request, profile) -> None:
    """For a server-era cell, the raw `vllm serve` run begins before the first server probe, in the
    background: those probes import vLLM meanwhile (about 20 s on two cores) instead of before it."""
    if profile.name == "server":
        try:
            runs = request.getfixturevalue("extraction_runs")
        except Exception:  # noqa: BLE001 - the probes that need the runs meet this themselves, each reporting it
            return
        runs.start("raw")


@pytest.fixture(scope="session")
def variants(extraction_runs, model_dir, speculators_version, cell_spec):
    """The cell's server-era variants (test_server_variants.VariantRuns), shared by every module that serves one."""
    from compat.cell.probes.server.test_server_variants import VariantRuns

    return VariantRuns(extraction_runs, model_dir, speculators_version, cell_spec)


@pytest.fixture(scope="session")
def reference_model(model_dir):
    from compat.cell.reference import load_reference_model

    return load_reference_model(model_dir)
