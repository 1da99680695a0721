"""The integration tests read what `python -m compat run` wrote for the default matrix."""

import os
from pathlib import Path

import pytest

from compat.shared.records import to_json
from compat.shared.results import load_cell

RESULTS = Path(os.environ.get("COMPAT_RESULTS_DIR", Path(__file__).resolve().parents[2] / "results"))


@pytest.fixture(scope="session")
def cell():
    def load(vllm: str, speculators: str, backend: str = "cpu") -> dict:
        path = RESULTS / f"vllm-{vllm}__speculators-{speculators}__{backend}.json"
        assert path.is_file(), f"{path} missing: run `python -m compat run` (the default matrix) first"
        return to_json(load_cell(path))
    return load


def probes_by_key(cell: dict) -> dict:
    return {(p["id"], p.get("case")): p for p in cell["probes"]}
