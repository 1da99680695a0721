"""The support table's selection, inference, answers and report section (compat.harness.support,
compat.harness.report.support_table), and the wheel readings they rest on (fingerprint, model runner),
from recorded inputs: facts as the static layer and the index give them for a row."""

from __future__ import annotations

import pytest

from compat.harness import support
from compat.harness.documents import load_support
from compat.harness.report import render_html, render_markdown
from compat.harness.report.support_table import fragments, outcome_ranges
from compat.harness.static.fingerprint import normalised, runner_path
from compat.harness.static.model_runner import read_model_runner, v2_method_rule
from compat.shared.records import Backend, CellRecord, Machine, Verdict


def facts(v, fp, verdict="api-compatible", broken=(), build=True, conflict="", spec="0.9.0", profile="server"):
    return support.PairFacts(v, spec, verdict, tuple(broken), fp, profile, build, conflict)


# A recorded row in the shape speculators 0.9.0's takes: pins conflict early, a static flip, patch
# releases sharing a fingerprint, a newest release with no CPU build.
ROW = [
    facts("0.18.0", "a", conflict="transformers<5 against >=5"),
    facts("0.19.1", "b", "api-incompatible", ("import:X",)),
    facts("0.21.0", "c", "api-incompatible", ("import:X",)),
    facts("0.22.0", "d"),
    facts("0.22.1", "d"),
    facts("0.23.0", "e"),
    facts("0.25.0", "f"),
    facts("0.25.1", "f"),
    facts("0.32.0", "g"),
    facts("0.33.0", "g2", build=False),
]


def by_vllm(planned):
    return {p.vllm: p for p in planned}


def test_runtime_cells_are_flip_sides_first_newest_and_fingerprint_changes():
    planned = by_vllm(support.plan(ROW))
    assert planned["0.18.0"].kind == support.RESOLVER and "transformers<5" in planned["0.18.0"].conflict
    assert planned["0.19.1"].kind == support.RUNTIME and any("first" in r for r in planned["0.19.1"].reasons)
    assert any("the side before" in r for r in planned["0.21.0"].reasons)
    assert any("the side after" in r and "holds again import:X" in r for r in planned["0.22.0"].reasons)
    assert planned["0.23.0"].kind == support.RUNTIME and "fingerprint d -> e" in planned["0.23.0"].reasons[0]
    assert planned["0.32.0"].kind == support.RUNTIME and any("newest" in r for r in planned["0.32.0"].reasons)
    assert planned["0.33.0"].kind == support.STATIC_ONLY


def test_inferred_cells_name_their_source_and_shared_fingerprint():
    planned = by_vllm(support.plan(ROW))
    for v, source in (("0.22.1", "0.22.0"), ("0.25.1", "0.25.0")):
        assert planned[v].kind == support.INFERRED
        assert planned[v].inferred_from == (source, "0.9.0")
        assert planned[v].fingerprint == planned[source].fingerprint
        assert source in planned[v].reasons[0] and planned[v].fingerprint in planned[v].reasons[0]


def test_a_static_change_alone_makes_a_runtime_cell():
    row = [facts("0.20.0", "a"), facts("0.20.1", "a", "api-incompatible", ("call:Y",)), facts("0.20.2", "a")]
    planned = by_vllm(support.plan(row))
    assert [planned[v].kind for v in ("0.20.0", "0.20.1", "0.20.2")] == [support.RUNTIME] * 3


def test_a_release_without_a_runtime_build_is_inferred_only_from_its_own_fingerprint():
    row = [facts("0.32.0", "g"), facts("0.33.0", "g", build=False)]
    planned = by_vllm(support.plan(row))
    assert planned["0.33.0"].kind == support.INFERRED and "no runtime build" in planned["0.33.0"].reasons[0]


def test_one_row_at_a_time_and_a_known_axis():
    with pytest.raises(support.SupportError, match="one row at a time"):
        support.plan([facts("0.22.0", "d"), facts("0.22.0", "d", spec="0.8.1")])
    with pytest.raises(support.SupportError, match="axis 'row'"):
        support.plan(ROW, axis="row")


def test_answers_measured_inferred_static_and_resolver():
    planned = support.plan(ROW)
    measured = {("0.22.0", "0.9.0"): support.Measured("compatible-with-compat", "id-22"),
                ("0.19.1", "0.9.0"): support.Measured("unsupported-on-cpu"),
                ("0.25.0", "0.9.0"): support.Measured("incompatible", fixes=("pass --no-enable-prefix-caching",))}
    answers = {a.vllm: a for a in support.answer(planned, measured, {("0.33.0", "0.9.0"): []})}
    assert (answers["0.22.0"].provenance, answers["0.22.0"].outcome) == ("measured", "adapters")
    assert (answers["0.22.1"].provenance, answers["0.22.1"].verdict) == ("inferred", "compatible-with-compat")
    assert answers["0.22.1"].source == ("0.22.0", "0.9.0")
    # a runtime cell that has not run is never shown as measured
    assert (answers["0.23.0"].outcome, answers["0.23.0"].provenance) == ("untested", "static-only")
    assert "has not run yet" in answers["0.23.0"].notes[0]
    # ... and one the static layer finds broken reads broken (static only) until it runs
    unrun = {a.vllm: a for a in support.answer(planned, {}, {("0.21.0", "0.9.0"): ["x.py:1: gone"]})}
    assert (unrun["0.21.0"].outcome, unrun["0.21.0"].provenance) == ("broken", "static-only")
    assert unrun["0.21.0"].fix == "static break: x.py:1: gone"
    assert (answers["0.25.1"].outcome, answers["0.25.1"].fix) == ("broken", "pass --no-enable-prefix-caching")
    assert answers["0.18.0"].verdict == "install-error" and answers["0.18.0"].provenance == "resolver"
    assert answers["0.33.0"].provenance == "static-only" and answers["0.33.0"].outcome == "untested"
    # a broken cell names the nearest working pair
    assert answers["0.25.0"].nearest.startswith("vLLM 0.22.1 x speculators 0.9.0") or \
        answers["0.25.0"].nearest.startswith("vLLM 0.22.0 x speculators 0.9.0")
    assert "with the compat adapters" in answers["0.18.0"].nearest


def test_an_inferred_cell_whose_source_has_not_run_is_untested():
    planned = support.plan(ROW)
    answers = {a.vllm: a for a in support.answer(planned, {})}
    assert answers["0.22.1"].outcome == "untested" and "which has not run" in answers["0.22.1"].notes[0]


def test_check_inferred_is_seeded_and_reports_disagreement():
    planned = support.plan(ROW)
    first = [p.vllm for p in support.pick_checks(support.plan(ROW), 1, seed=7)]
    again = [p.vllm for p in support.pick_checks(planned, 1, seed=7)]
    assert first == again and first[0] in ("0.22.1", "0.25.1")
    assert set(support.runtime_pairs(planned)) >= {(first[0], "0.9.0")}
    checked = first[0]
    source = by_vllm(planned)[checked].inferred_from
    measured = {source: support.Measured("compatible"), (checked, "0.9.0"): support.Measured("incompatible")}
    answers = support.answer(planned, measured)
    result = support.agreement(answers)
    assert result["checked"] == 1 and result["agree"] == 0 and "DISAGREES" in result["disagreements"][0]
    measured[(checked, "0.9.0")] = support.Measured("compatible")
    assert support.agreement(support.answer(planned, measured)) == {"checked": 1, "agree": 1, "disagreements": []}
    with pytest.raises(support.SupportError, match="--check-inferred -1"):
        support.pick_checks(planned, -1, seed=1)


def test_ranges_in_browser_compat_words():
    answers = [support.Answer(v, "0.9.0", "measured", o, "x") for v, o in
               (("0.20.0", "broken"), ("0.21.0", "works"), ("0.22.0", "works"), ("0.23.0", "broken"))]
    r = support.ranges(answers)
    assert r["works"] == [{"version_added": "0.21.0", "version_last": "0.22.0", "version_removed": "0.23.0"}]
    assert [x["version_added"] for x in r["broken"]] == ["0.20.0", "0.23.0"]
    assert r["broken"][-1]["version_removed"] is None


def _document():
    planned = support.plan(ROW)
    measured = {("0.22.0", "0.9.0"): support.Measured("compatible"),
                ("0.25.0", "0.9.0"): support.Measured("incompatible", fixes=("the registry's fix",))}
    answers = support.answer(planned, measured)
    return {"axis": "vllm", "fixed": "0.9.0", "cells": [a.as_dict() for a in answers],
            "model_runners": {"0.32.0": "GPU default for extract_hidden_states: V2"}, "agreement": {"checked": 0}}


def test_report_section_opens_the_report_and_labels_every_cell_in_words():
    from compat.harness.report import build_report

    report = build_report([])
    report["support"] = [_document()]
    html = render_html(report)
    assert html.index('id="support"') < html.index('id="matrix"')
    for word in ("measured", "inferred", "static only", "pins conflict", "works", "broken", "untested"):
        assert word in html
    assert "install instead: vLLM 0.22" in html and "fix: the registry&#39;s fix" in html
    assert "model runner: GPU default for extract_hidden_states: V2" in html
    md = render_markdown(report)
    assert md.index("Which vLLM works with my speculators?") < md.index("Details") if "Details" in md else True
    assert "≈ works as released · inferred" in md or "✔≈ works as released · inferred" in md


def test_report_without_support_has_no_section():
    from compat.harness.report import build_report

    assert 'id="support"' not in render_html(build_report([]))
    assert fragments(None)["markdown"] == ""


def test_outcome_ranges_keep_provenance():
    doc = load_support(_document())
    cells = sorted(doc.cells, key=lambda c: tuple(int(x) for x in c.vllm.split(".")))
    works = outcome_ranges(cells)["works"]
    assert works[0]["version_added"] == "0.22.0" and works[0]["provenance"] == ["inferred", "measured"]


# --- the readings from the wheel ---------------------------------------------------------------

def test_fingerprint_ignores_docstrings_comments_and_layout_but_not_code():
    a = 'def f(x):\n    """doc"""\n    return x + 1  # one\n'
    b = 'def f(x):\n    """other doc"""\n\n    return (x +\n            1)\n'
    c = 'def f(x):\n    return x + 2\n'
    assert normalised(a) == normalised(b) != normalised(c)


def test_runner_path_keeps_only_the_hidden_state_functions():
    source = ("class R:\n    def execute_model(self):\n        return 1\n"
              "    def attention_backend(self):\n        return 2\n"
              "    def _aux(self):\n        return self.aux_hidden_states\n")
    kept = runner_path(source)
    assert "execute_model" in kept and "_aux" in kept and "attention_backend" not in kept
    changed = source.replace("return 2", "return 3")
    assert runner_path(changed) == kept
    assert runner_path(source.replace("return 1", "return 4")) != kept


CONFIG_ALLOW = '''
DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES = frozenset({"Qwen3ForCausalLM"})
class VllmConfig:
    def use_v2_model_runner(self):
        if envs.VLLM_USE_V2_MODEL_RUNNER is not None:
            return envs.VLLM_USE_V2_MODEL_RUNNER
        if not self._is_default_v2_model_runner_model():
            return False
        if not HAS_TRITON:
            return False
        return not self._get_v2_model_runner_unsupported_features()
    def _is_default_v2_model_runner_model(self):
        return any(a in DEFAULT_V2_MODEL_RUNNER_ARCHITECTURES for a in self.model_config.architectures)
    def _get_v2_model_runner_unsupported_features(self):
        unsupported = []
        if speculative_config.method not in ("eagle", "eagle3"):
            unsupported.append(f"speculative method '{speculative_config.method}'")
        if speculative_config.method not in ("dflash",):
            unsupported.append("parallel drafting")
        return unsupported
'''


def test_model_runner_read_from_the_sources():
    facts_ = read_model_runner({"vllm/config/vllm.py": CONFIG_ALLOW}, has_v2=True, version="0.22.1")
    assert facts_["selection"] == "auto" and facts_["default_architectures"] == ["Qwen3ForCausalLM"]
    assert facts_["v2_serves_extract"] is False and facts_["default_gpu"] == "V1" and facts_["needs_triton"]
    assert "V2 refuses extract_hidden_states" in facts_["text"] and "read from the wheel" in facts_["text"]
    every = (CONFIG_ALLOW.replace('("eagle", "eagle3")', '("eagle", "extract_hidden_states")')
             .replace("        if not self._is_default_v2_model_runner_model():\n            return False\n", ""))
    served = read_model_runner({"vllm/config/vllm.py": every}, has_v2=True)
    assert served["default_gpu"] == "V2" and served["default_cpu"] == "V1"
    assert served["default_architectures"] == "every model"
    deny = CONFIG_ALLOW.replace('method not in ("eagle", "eagle3")', 'method in ("suffix", "medusa")')
    assert v2_method_rule(deny) == ("deny", ["suffix", "medusa"])
    assert read_model_runner({"vllm/config/vllm.py": deny}, has_v2=True)["v2_serves_extract"] is True
    opt_in = read_model_runner({"vllm/envs.py": 'os.getenv("VLLM_USE_V2_MODEL_RUNNER", "0")'}, has_v2=True)
    assert opt_in["selection"].startswith("opt-in") and opt_in["default_gpu"] == "V1"
    assert read_model_runner({}, has_v2=False)["text"].startswith("V1 (no Model Runner V2")


def test_nox_report_reads_the_stored_support_tables(tmp_path):
    import json

    from compat.harness.report_cli import main

    (tmp_path / "results" / "support").mkdir(parents=True)
    (tmp_path / "results" / "support" / "speculators-0.9.0.json").write_text(json.dumps(_document()))
    code = main(["--results", str(tmp_path / "results"), "--out", str(tmp_path / "reports")])
    assert code == 3  # no cell result file: said so, and the reports are still written
    html = (tmp_path / "reports" / "compat.html").read_text()
    assert 'id="support"' in html and "speculators 0.9.0" in html


def test_contract_support_in_browser_compat_words():
    outcomes = {"0.16.0": {"a": "ok", "b": "broken", "c": "ok"}, "0.17.0": {"a": "broken", "b": "ok", "c": "ok"},
                "0.18.0": {"a": "broken", "b": "ok", "c": "ok"}, "0.19.0": {"a": "ok", "b": "ok", "c": "ok"}}
    found = support.contract_support(outcomes)
    assert "c" not in found  # holds everywhere: nothing to say
    assert found["a"] == [{"version_added": "0.16.0", "version_removed": "0.17.0"},
                          {"version_added": "0.19.0", "version_removed": None}]
    assert found["b"] == [{"version_added": "0.17.0", "version_removed": None}]
    doc = dict(_document(), contracts=found)
    html = fragments([doc])["html"]
    assert "version_added 0.16.0, version_removed 0.17.0" in html and "version_removed none (holds)" in html


@pytest.mark.parametrize(("argv", "says"), [
    (["--all-vllm", "--all-speculators", "--speculators", "0.9.0"], "give one (a row or a column), not both"),
    (["--all-vllm"], "--all-vllm takes exactly one --speculators S"),
    (["--all-vllm", "--speculators", "0.9.0", "--vllm", "0.22.1"], "--all-vllm takes exactly one --speculators S"),
    (["--all-speculators", "--speculators", "0.9.0"], "--all-speculators takes exactly one --vllm V"),
    (["--all-vllm", "--speculators", "nine"], "'nine': not a version, and no such file or folder"),
    (["--all-vllm", "--speculators", "0.9.0", "--matrix", "m.toml"], "--matrix m.toml: not accepted with --all-vllm"),
])
def test_a_bad_row_or_column_request_says_what_is_accepted(argv, says, capsys):
    from compat.harness.run_command import main

    assert main(argv) == 64  # a bad command line: the usage code (issue 44)
    assert says in capsys.readouterr().err


def test_a_row_request_parses():
    from compat.harness.settings import SupportRequest, parse

    row = parse(["--speculators", "0.8.1", "--all-vllm", "--check-inferred", "2", "--seed", "5"]).support
    assert row == SupportRequest(axis="vllm", fixed="0.8.1", backend="cpu", check_inferred=2, seed=5)
    column = parse(["--vllm", "0.22.1", "--all-speculators"]).support
    assert column is not None and (column.axis, column.fixed) == ("speculators", "0.22.1")


def test_a_column_infers_only_across_speculators_releases_with_the_same_own_code():
    column = [support.PairFacts("0.22.1", s, "api-compatible", (), "d", "server", True, "", code)
              for s, code in (("0.5.0", "x"), ("0.6.0", "x"), ("0.7.0", "y"), ("0.9.0", "z"))]
    planned = {p.speculators: p for p in support.plan(column, axis="speculators")}
    assert planned["0.6.0"].kind == support.INFERRED and planned["0.6.0"].inferred_from == ("0.22.1", "0.5.0")
    assert planned["0.7.0"].kind == support.RUNTIME and "own extraction code x -> y" in planned["0.7.0"].reasons[0]


def test_a_broken_range_names_what_to_install_instead_where_the_ranges_are_read():
    doc = _document()
    cells = sorted(load_support(doc).cells, key=lambda c: tuple(int(x) for x in c.vllm.split(".")))
    broken = outcome_ranges(cells)["broken"]
    assert broken and all(r["instead"] for r in broken)
    answer = next(line for line in fragments([doc])["markdown"].splitlines() if line.startswith("| 0.9.0 |"))
    broken_column = answer.split(" | ")[4]
    assert "install instead: vLLM 0.22" in broken_column
    assert " x speculators 0.9.0" not in broken_column  # the row's own release, not said again on its line


def test_a_pair_measured_on_the_other_backend_shows_beside_the_row():
    """A CPU row's cell the CPU build cannot serve (unsupported-on-cpu) next to the same pair run on a
    GPU: its own column in the answer, a mark in the cell, the run in the footnote; the row's outcome
    stays the CPU's."""
    from compat.harness.report import build_report

    doc = dict(_document(), backend="cpu")
    runs = [_decided("vllm-0.23.0__speculators-0.9.0__gpu__variants-none", "gpu", "compatible-with-compat"),
            _decided("vllm-0.23.0__speculators-0.9.0__cpu", "cpu", "unsupported-on-cpu"),
            _decided("vllm-0.25.0__speculators-0.9.0__gpu", "gpu", "error")]
    joined = support.with_other_backends(doc, runs)
    cell = {c["vllm"]: c for c in joined["cells"]}
    assert cell["0.23.0"]["elsewhere"] == [{"backend": "gpu", "verdict": "compatible-with-compat",
                                           "outcome": "adapters", "cell_id": runs[0][0].id}]
    assert cell["0.25.0"]["elsewhere"] == [] and cell["0.23.0"]["outcome"] == dict(
        (c["vllm"], c) for c in doc["cells"])["0.23.0"]["outcome"]
    assert support.with_other_backends(_document(), runs) == _document()  # no backend stated: nothing joined
    report = build_report([])
    report["support"] = [joined]
    html, md = render_html(report), render_markdown(report)
    assert "measured on the other backend" in html and "gpu: 0.23.0 ◐" in html
    assert "also measured on gpu: works with the compat adapters (compatible-with-compat" in html
    assert "gpu: 0.23.0 ◐" in md
    report["support"] = [doc]
    assert "measured on the other backend" not in render_html(report)


def test_other_backend_runs_is_the_one_join_of_the_table_and_the_report():
    """One function says which runs decided a pair on the other backend: the report's cells (their own
    verdict), the published answer (a stored record's decided verdict); in the order given, nothing undecided
    (a record always names its backend: the typed record holds one)."""
    runs = [_decided("b", "gpu", "incompatible", vllm="0.24.0", machine=Machine(gpu="1 x H200"),
                     finished_at="2026-12-01"),
            _decided("a", "gpu", "compatible"),
            _decided("c", "cpu", "compatible"),
            _decided("d", "gpu", "error")]
    found = support.other_backend_runs(runs, "cpu")
    assert [(r["cell_id"], r["outcome"], r["machine"], r["finished_at"]) for r in found] == [
        ("b", "broken", "1 x H200", "2026-12-01"), ("a", "works", "?", "undated")]
    assert [r["cell_id"] for r in support.other_backend_runs([(r, Verdict.COMPATIBLE) for r, _ in runs], "cpu")] \
        == ["b", "a", "d"]
    assert support.other_backend_runs(runs, "gpu") == [dict(found[1], backend="cpu", cell_id="c")]


def _decided(cell_id: str, backend: str, verdict: str, vllm: str = "0.23.0", machine: Machine | None = None,
             finished_at: str | None = None) -> tuple[CellRecord, Verdict]:
    """A record of vLLM `vllm` x speculators 0.9.0 with its decided verdict, as other_backend_runs reads it."""
    record = CellRecord(schema_version=4, id=cell_id, vllm=vllm, speculators="0.9.0", backend=Backend(backend),
                        verdict=Verdict(verdict), probes=[], machine=machine, finished_at=finished_at)
    return record, Verdict(verdict)


def test_the_report_joins_the_stored_runs_of_the_other_backend(tmp_path):
    """Through `nox -s report`'s own path: a CPU row and a committed H200 run of one of its pairs."""
    import json
    import shutil
    from pathlib import Path

    from compat.harness.report_cli import main

    results = tmp_path / "results"
    (results / "support").mkdir(parents=True)
    row = json.loads(json.dumps(dict(_document(), backend="cpu")).replace('"0.9.0"', '"0.8.1"'))
    (results / "support" / "speculators-0.8.1.json").write_text(json.dumps(row))
    gpu = Path(__file__).resolve().parents[2] / "reports" / "gpu-h200" / "s081" / "results" / \
        "vllm-0.23.0__speculators-0.8.1__gpu__variants-none.json"
    shutil.copy(gpu, results / gpu.name)
    main(["--results", str(results), "--out", str(tmp_path / "reports"), "--store", str(tmp_path / "s.sqlite")])
    md = (tmp_path / "reports" / "compat.md").read_text()
    assert "measured on the other backend" in md and "gpu: 0.23.0 ◐" in md


def test_a_release_with_the_same_extraction_code_stands_for_this_rows_runtime_cells():
    """0.7.0.2 ships 0.7.0.1's data_generation/: a cell 0.7.0.1's row measured, with the same vLLM
    fingerprint and static result, infers 0.7.0.2's; a pair the sibling did not measure, or one whose
    static result differs, still runs; the cells inferred from a moved cell follow it."""
    def mine(v, fp, spec, verdict="api-compatible"):
        return support.PairFacts(v, spec, verdict, (), fp, "server", True, "", "code-7")

    row = [mine("0.22.0", "d", "0.7.0.2"), mine("0.22.1", "d", "0.7.0.2"), mine("0.23.0", "e", "0.7.0.2"),
           mine("0.25.0", "f", "0.7.0.2")]
    siblings = [mine("0.22.0", "d", "0.7.0.1"), mine("0.23.0", "e", "0.7.0.1"),
                mine("0.25.0", "f", "0.7.0.1", "api-incompatible")]
    planned = support.infer_across(support.plan(row), row, siblings, [("0.22.0", "0.7.0.1"), ("0.25.0", "0.7.0.1")])
    got = by_vllm(planned)
    assert got["0.22.0"].kind == support.INFERRED and got["0.22.0"].inferred_from == ("0.22.0", "0.7.0.1")
    assert "speculators 0.7.0.1" in got["0.22.0"].reasons[0]
    assert got["0.22.1"].inferred_from == ("0.22.0", "0.7.0.1")  # followed its source
    assert got["0.23.0"].kind == support.RUNTIME  # the sibling's 0.23.0 was not measured
    assert got["0.25.0"].kind == support.RUNTIME  # another static result: not the same key
    other_code = [support.PairFacts("0.22.0", "0.7.0.1", "api-compatible", (), "d", "server", True, "", "code-6")]
    assert by_vllm(support.infer_across(support.plan(row), row, other_code, [("0.22.0", "0.7.0.1")]))["0.22.0"].kind \
        == support.RUNTIME
    answers = {a.vllm: a for a in support.answer(planned, {("0.22.0", "0.7.0.1"): support.Measured("compatible")})}
    assert answers["0.22.1"].verdict == "compatible" and answers["0.22.1"].source == ("0.22.0", "0.7.0.1")


def test_neighbouring_rows_with_the_same_ranges_share_an_answer_line():
    """The answer stays one screen as releases come: neighbours whose outcomes cover the same vLLM
    ranges share a line (symbols joined, the newest pair to install instead, measured first); a pair run
    on the other backend for only some of them names them; a row between them with other ranges keeps
    them apart."""
    from compat.harness.report.support_table import answer_lines

    def row(spec, provenance, elsewhere=(), broken=("0.21.0",)):
        cells = [{"vllm": v, "speculators": spec, "outcome": o, "provenance": provenance,
                  "verdict": "incompatible" if o == "broken" else "compatible",
                  "nearest": f"vLLM 0.22.0 x speculators {spec} (as released, {provenance})" if o == "broken" else "",
                  "elsewhere": [{"backend": "gpu", "outcome": "works"}] if v in elsewhere else []}
                 for v in ("0.21.0", "0.22.0") for o in ["broken" if v in broken else "works"]]
        return load_support({"axis": "vllm", "fixed": spec, "cells": cells}).cells

    rows = {"0.6.0": row("0.6.0", "inferred"), "0.6.0.1": row("0.6.0.1", "measured", ("0.22.0",)),
            "0.6.0.2": row("0.6.0.2", "inferred")}
    [(specs, texts)] = answer_lines(rows, elsewhere=True)
    assert specs == ["0.6.0", "0.6.0.1", "0.6.0.2"]
    assert texts == ["0.22.0 ≈●", "none", "none", "0.21.0 ≈● → install instead: vLLM 0.22.0 ✔●",
                     "gpu: 0.22.0 ✔ (0.6.0.1)"]
    apart = dict(rows, **{"0.6.0.1": row("0.6.0.1", "measured", ("0.22.0",), broken=("0.21.0", "0.22.0"))})
    assert [specs for specs, _ in answer_lines(apart, elsewhere=False)] == [["0.6.0"], ["0.6.0.1"], ["0.6.0.2"]]


def test_the_newest_run_of_a_pair_on_a_backend_answers_for_it_once():
    """Two GPU runs of one pair (an older, undated pass; a dated failure): the cell shows the newest alone, as check
    and the answer's column do. A date this cannot read counts as undated, never as the newest."""
    doc = dict(_document(), backend="cpu")
    runs = [_decided("vllm-0.23.0__speculators-0.9.0__gpu", "gpu", "compatible"),
            _decided("vllm-0.23.0__speculators-0.9.0__gpu__variants-none", "gpu", "incompatible",
                     finished_at="2026-12-05T04:36:01Z")]
    cell = {c["vllm"]: c for c in support.with_other_backends(doc, runs)["cells"]}
    assert [r["verdict"] for r in cell["0.23.0"]["elsewhere"]] == ["incompatible"]
    dates = ["unknown", "2026-12-05T06:00:00+09:00", "2026-12-05T04:36:01Z", "undated", "2026-12-05T05:00:00"]
    order = [r["finished_at"] for r in support.newest_first([{"finished_at": d} for d in dates])]
    assert order == ["2026-12-05T04:36:01Z", "2026-12-05T06:00:00+09:00", "unknown", "undated",
                     "2026-12-05T05:00:00"]  # +09:00 is 21:00Z the day before; no zone: not comparable, undated


def test_every_evidence_class_has_its_mark_and_words_in_the_report():
    """The report's row strip and footnotes draw every provenance the table can hold (a nearest-kernel cell read
    KeyError before)."""
    from compat.harness.report import support_table

    for provenance in support.Provenance:
        assert provenance.value in support_table.PROVENANCE_SYMBOLS, provenance
        assert provenance.value in support_table.PROVENANCE_WORDS, provenance
