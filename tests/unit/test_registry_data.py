"""The registry as data (issue 31 item 4): compat.shared.breakages holds the entries and REGISTRY built from them,
compat.shared.breakage_model the model and the matching (re-exported by breakages); an entry holds what matching
and the report need, and its docs/findings.md section the account of what was observed where."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from compat.shared import breakage_model, breakages
from compat.shared.breakages import BY_ID, FINDINGS, REGISTRY

ROOT = Path(__file__).resolve().parents[2]


def test_breakages_re_exports_the_model_it_builds_its_entries_with():
    for name in breakages.__all__:
        assert hasattr(breakages, name), name
    for name in ("Breakage", "Symptom", "Prose", "data_symptoms", "REFERENCE_PROBE", "PREFIX_CACHING", "_specifier"):
        assert getattr(breakages, name) is getattr(breakage_model, name), name
    assert all(type(e) is breakage_model.Breakage for e in REGISTRY) and list(BY_ID) == [e.id for e in REGISTRY]


def test_an_entry_holds_no_account_of_where_it_was_observed_its_findings_section_does():
    """The provenance is docs/findings.md's: an entry has no notes field, and what the report's JSON printed as
    its notes (and its user symptom's) is the address of its section, which exists."""
    fields = {f.name for f in dataclasses.fields(breakage_model.Breakage)}
    assert not fields & {"notes", "user_symptom_notes"}, fields
    headings = set(re.findall(r"^## (\S+)\s*$", (ROOT / FINDINGS).read_text(), re.M))
    for entry in REGISTRY:
        assert entry.id in headings, entry.id
        assert entry.findings == f"{FINDINGS}#{entry.id}" and entry.findings in entry.references, entry.id
        shown = entry.as_dict()
        assert shown["notes"] == entry.findings
        assert shown["user_symptom"] is None or shown["user_symptom"]["notes"] == entry.findings


def test_the_registry_imports_only_the_model_and_the_model_no_entries():
    imports = re.findall(r"^(?:from|import) ([\w.]+)", (ROOT / "compat/shared/breakages.py").read_text(), re.M)
    assert set(imports) == {"__future__", "compat.shared.breakage_model"}, imports
    assert "Breakage(\n" not in (ROOT / "compat/shared/breakage_model.py").read_text()
