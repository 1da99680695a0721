"""A record made before a probe was isolated from another's contract is labelled, never read as a finding (issue 45
item 4): the published 0.22.1 x 0.4.0.1 H200 record (probe set 0) holds request_signature's exception under
block_hasher, which the harness since 2cd8353 builds the version-proof way. Its block_hasher reads that known
breakage with a note saying so (its own contract not reached as released, ok with the adapters) until the cell
runs again on a GPU; the published table's own gate reports no NEW (tests/unit/test_page_sizes.py)."""

from __future__ import annotations

import copy

import pytest

from compat.harness import causes
from compat.harness.classify import new_findings
from compat.harness.published import RESULTS
from compat.harness.report import build_report, render_markdown
from compat.harness.verdict import decide
from compat.shared.records import to_json
from compat.shared.results import load_cell
from record_factory import probe_record, shown_pairs

GPU = RESULTS / "vllm-0.22.1__speculators-0.4.0.1__gpu.json"  # kept as its .json.gz


@pytest.fixture(scope="module")
def record() -> dict:
    return to_json(load_cell(GPU))


def _block_hasher(decision):
    return next(cls for p, cls in shown_pairs(decision) if p.get("id") == "block_hasher")


def _new(decision) -> int:
    return sum(len(new_findings(cls)) for _p, cls in shown_pairs(decision))


def _probe(record: dict, pid: str) -> dict:
    return next(p for p in record["probes"] if p["id"] == pid)


def test_the_older_records_leaked_exception_reads_the_known_breakage_labelled(record):
    decision = decide(record)
    cls = _block_hasher(decision)
    assert (cls.kind, cls.breakage.id) == ("known", "request_signature")
    assert cls.note.startswith(causes.OLDER_HARNESS) and "2cd8353" in cls.note
    assert _new(decision) == 0 and decision.gate == 0 and decision.verdict == "compatible-with-compat"
    md = render_markdown(build_report([record]))
    assert "`block_hasher`" in md and causes.OLDER_HARNESS in md  # the report says so


def test_without_the_rule_the_same_record_reads_new(record, monkeypatch):
    monkeypatch.setattr(causes, "ISOLATED_SINCE", {})
    decision = decide(record)
    assert _block_hasher(decision).kind == "new" and _new(decision) == 1 and decision.gate == 1


def _leak(probe, probes, *args):
    """causes.older_harness_leak on the probes written as JSON, typed."""
    return causes.older_harness_leak(probe_record(probe), [probe_record(p) for p in probes], *args)


def test_a_newer_harness_or_another_exception_is_still_a_finding(record):
    assert _leak(_probe(record, "block_hasher"), record["probes"], 1) is None  # had the fix
    assert _leak(_probe(record, "block_hasher"), record["probes"], 0, "0" * 40) is None
    other = copy.deepcopy(record)
    _probe(other, "block_hasher")["error"] = {"type": "AssertionError", "message": "no block hashes", "where": None}
    assert _leak(_probe(other, "block_hasher"), other["probes"], 0) is None
    assert _block_hasher(decide(other)).kind == "new"
