"""The default matrix's real results through the one verdict rule, the gate and `explain`."""

import os
from pathlib import Path

import pytest

from compat.harness.classify import classify_cell
from compat.harness.explain import exceptions_in, explain
from compat.harness.explain_context import contexts
from compat.harness.verdict import PASS, decide, matrix_gate
from compat.shared.records import ProbeStatus
from compat.shared.results import load_cell

RESULTS = Path(os.environ.get("COMPAT_RESULTS_DIR", Path(__file__).resolve().parents[2] / "results"))
DEFAULT_CELLS = ["vllm-0.11.0__speculators-0.3.0__cpu", "vllm-0.16.0__speculators-0.3.0__cpu",
                 "vllm-0.16.0__speculators-0.4.0.1__cpu", "vllm-0.22.1__speculators-0.8.1__cpu",
                 "vllm-0.32.0__speculators-0.9.0__cpu"]
IN_PROCESS_BROKEN = ["vllm-0.16.0__speculators-0.3.0__cpu"]


@pytest.fixture(scope="module")
def cells():
    missing = [c for c in DEFAULT_CELLS if not (RESULTS / f"{c}.json").is_file()]
    assert not missing, f"{missing} missing in {RESULTS}: run `python -m compat run` (the default matrix) first"
    return [load_cell(RESULTS / f"{c}.json") for c in DEFAULT_CELLS]


def test_the_default_matrix_passes_the_gate(cells):
    gates = {c.id: (decide(c).gate, decide(c).reasons) for c in cells}
    assert matrix_gate(cells) == PASS, {k: v for k, v in gates.items() if v[0] != PASS}


def test_every_failure_of_the_default_matrix_is_a_known_breakage(cells):
    for cell in cells:
        for probe, cls in classify_cell(cell):
            if probe.status is ProbeStatus.BROKEN and not cls.advisory:
                assert cls.kind == "known", (cell.id, probe.id, probe.case, cls.note)
            if cls.behind is not None:
                assert cls.behind.kind == "known", (cell.id, probe.id, probe.case, cls.behind.note)
            assert not cls.adapter_regression, (cell.id, probe.id, cls.adapter_regression)


def test_the_stored_verdicts_are_the_derived_ones(cells):
    for cell in cells:
        assert cell.verdict is decide(cell).verdict, cell.id


@pytest.mark.parametrize("cell_id", IN_PROCESS_BROKEN)
def test_explain_names_a_breakage_for_every_traceback_of_the_real_probe_log(cells, cell_id):
    record = next(c for c in cells if c.id == cell_id)
    text = (RESULTS / cell_id / "probes.log").read_text(errors="replace")
    found = exceptions_in(text)
    assert found, "no traceback in the probe log of a cell with broken probes"
    around = contexts(text, [f.line for f in found])  # as `nox -s explain` reads a log: each exception with its context
    unexplained = [(f.type, f.message[:100], f.where) for f, c in zip(found, around)
                   if not explain(f, record.vllm, record.speculators, record.backend, context=c).matches]
    assert not unexplained
