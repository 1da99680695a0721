"""Every record the default matrix wrote is a schema-2 record whose evidence holds on its own:
its probe keys are the manifest's (compat/shared/manifest.py), every data probe that says ok carries
figures that prove it, and so does every with-compat ok. A difference here is a harness defect."""

import pytest

from compat.harness.evidence import DATA_PROBES, figures_pass, fixture_of
from compat.harness.verdict import decide
from compat.shared.manifest import PROBE_KEYS
from compat.shared.records import SCHEMA_VERSION, Figures, to_json, typed
from compat.shared.results import load_cell, probe_key
from conftest import RESULTS

DEFAULT_IDS = ["vllm-0.11.0__speculators-0.3.0__cpu", "vllm-0.16.0__speculators-0.3.0__cpu",
               "vllm-0.16.0__speculators-0.4.0.1__cpu", "vllm-0.22.1__speculators-0.8.1__cpu",
               "vllm-0.32.0__speculators-0.9.0__cpu"]


@pytest.mark.parametrize("cell_id", DEFAULT_IDS)
def test_the_record_is_schema_2_and_its_evidence_holds(cell_id):
    loaded = load_cell(RESULTS / f"{cell_id}.json")
    record = to_json(loaded)
    assert record["schema_version"] == SCHEMA_VERSION and "migrated_from" not in record
    keys = [probe_key(p) for p in record["probes"]]
    assert sorted(keys) == sorted(record["manifest"]["probes"]) == sorted(PROBE_KEYS)
    for probe, typed_probe in zip(record["probes"], loaded.probes):
        if probe["id"] not in DATA_PROBES:
            continue
        fixture = fixture_of(loaded, typed_probe)  # the tiny model it compared: a 16-bit allowance may be its own
        if probe["status"] == "ok":
            figures = typed(Figures, probe["figures"])
            assert figures_pass(figures, fixture)[0] is True, (probe_key(probe), probe["figures"])
        if probe["with_compat"] == "ok":
            assert figures_pass(typed(Figures, probe["with_compat_figures"]), fixture)[0] is True, probe_key(probe)
    decision = decide(record)
    assert not any("contradicts itself" in r for r in decision.reasons), decision.reasons
    assert record["verdict"] == decision.verdict
