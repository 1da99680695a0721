"""The registry as data (issue 31 item 4): compat.shared.breakages holds the entries and REGISTRY built from them,
compat.shared.breakage_model the model and the matching (re-exported by breakages); an entry's notes stay short
and point to its docs/findings.md section for the longer account of what was observed where."""

from __future__ import annotations

import re
from pathlib import Path

from compat.shared import breakage_model, breakages
from compat.shared.breakages import BY_ID, FINDINGS, REGISTRY

ROOT = Path(__file__).resolve().parents[2]
NOTE_LIMIT = 300  # longer provenance belongs to the entry's section of docs/findings.md


def test_breakages_re_exports_the_model_it_builds_its_entries_with():
    for name in breakages.__all__:
        assert hasattr(breakages, name), name
    for name in ("Breakage", "Symptom", "Prose", "data_symptoms", "REFERENCE_PROBE", "PREFIX_CACHING", "_specifier"):
        assert getattr(breakages, name) is getattr(breakage_model, name), name
    assert all(type(e) is breakage_model.Breakage for e in REGISTRY) and list(BY_ID) == [e.id for e in REGISTRY]


def test_notes_are_short_and_point_only_to_the_entrys_own_findings_section():
    headings = set(re.findall(r"^## (\S+)\s*$", (ROOT / FINDINGS).read_text(), re.M))
    for entry in REGISTRY:
        assert entry.id in headings, entry.id
        for field in ("notes", "user_symptom_notes"):
            text = getattr(entry, field)
            assert len(text) <= NOTE_LIMIT, f"{entry.id}.{field}: {len(text)} characters; move the rest to {FINDINGS}"
            for anchor in re.findall(re.escape(FINDINGS) + r"#(\w+)", text):
                assert anchor == entry.id, f"{entry.id}.{field} points to {FINDINGS}#{anchor}"


def test_the_registry_imports_only_the_model_and_the_model_no_entries():
    imports = re.findall(r"^(?:from|import) ([\w.]+)", (ROOT / "compat/shared/breakages.py").read_text(), re.M)
    assert set(imports) == {"__future__", "compat.shared.breakage_model"}, imports
    assert "Breakage(\n" not in (ROOT / "compat/shared/breakage_model.py").read_text()
