"""The probe catalog (compat.shared.probe_catalog) reads the keys the cell's pytest plugin reports,
from the probes' markers alone: checked against pytest's own collection with the plugin."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from compat.harness.evidence import DATA_PROBES
from compat.shared import probe_catalog
from compat.shared.breakages import REFERENCE_PROBE
from compat.shared.manifest import CORE_PROBE_KEYS, PROBE_KEYS, VARIANT_OF_KEY
from compat.shared.results import ADVISORY_PROBES

NEW_PROBE = '''
import pytest
from compat.cell.server_mode_runs import CASES

LOCAL = ["a", "b"]
PER_MODEL = {"b": "hybrid"}


@pytest.mark.probe("plain", contract=("call", "vllm.config.SchedulerConfig"), variant="llama-bfloat16")
def test_plain():
    pass


@pytest.mark.probe("cased", data=True)
@pytest.mark.parametrize("case", CASES)
def test_cased(case):
    pass


@pytest.mark.probe("cased", data=True)
@pytest.mark.compat_mode("with_compat")
@pytest.mark.parametrize("case", CASES)
def test_cased_with_compat(case):
    pass


@pytest.mark.probe("ranked", composite=True)
@pytest.mark.tp(2)
def test_ranked():
    pass


@pytest.mark.probe("per_model", variant=PER_MODEL)
@pytest.mark.parametrize("model", LOCAL)
def test_per_model(model):
    pass


@pytest.mark.probe("two_axes", advisory=True)
@pytest.mark.parametrize("model", LOCAL)
@pytest.mark.parametrize("size", [1, 2])
def test_two_axes(model, size):
    pass


@pytest.mark.probe("mixed")
@pytest.mark.tp(1)
@pytest.mark.parametrize("case", LOCAL)
def test_mixed(case):
    pass


def helper_not_a_test():
    pass
'''


def _write(tmp_path: Path, source: str) -> Path:
    path = tmp_path / "test_new_probe.py"
    path.write_text(textwrap.dedent(source))
    return path


def test_a_new_probe_is_read_from_its_markers_as_pytest_collects_it(tmp_path):
    path = _write(tmp_path, NEW_PROBE)
    out = tmp_path / "collected.json"
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-p", "compat.cell.pytest_plugin", f"--compat-result={out}", str(path)],
                         capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stdout + run.stderr
    collected = {f"{r['id']}[{r['case']}]" if r["case"] else r["id"] for r in json.loads(out.read_text())["collected"]}
    read = {key for probe in probe_catalog.read_module(path) for key in probe.keys}
    assert read == collected
    assert {"plain", "cased[batch]", "ranked[tp2]", "two_axes[2-a]"} <= read
    assert [p.id for p in probe_catalog.read_module(path) if p.data] == ["cased"]
    assert [p.id for p in probe_catalog.read_module(path) if p.advisory] == ["two_axes"]


def test_the_other_facts_of_a_new_probe_are_read_from_its_marker(tmp_path, monkeypatch):
    path = _write(tmp_path, NEW_PROBE)
    monkeypatch.setattr(probe_catalog, "probes", lambda: tuple(probe_catalog.read_module(path)))
    assert probe_catalog.ids_where("composite") == {"ranked"}
    assert probe_catalog.contracts() == {"plain": ("call", "vllm.config.SchedulerConfig")}
    # an unparametrized probe names its one key's variant; a parametrized one names it per case
    assert probe_catalog.variant_keys() == {"plain": "llama-bfloat16", "per_model[b]": "hybrid"}
    assert probe_catalog.ids_where("variant") == {"plain", "per_model"}


def test_the_real_probes_hold_every_key_records_have_held():
    assert set(CORE_PROBE_KEYS) <= set(PROBE_KEYS), "a probe every schema-1 record holds is no longer reported"
    assert set(VARIANT_OF_KEY) <= set(PROBE_KEYS), "a server-era variant decides a probe nobody runs"
    assert len(PROBE_KEYS) == len(set(PROBE_KEYS))
    assert REFERENCE_PROBE in DATA_PROBES and "worker_logging" in ADVISORY_PROBES


@pytest.mark.parametrize("source, named", [
    ('@pytest.mark.probe("x")\n@pytest.mark.parametrize("case", make_cases())\ndef test_x(case): pass\n',
     "make_cases()"),
    ('@pytest.mark.probe("x")\n@pytest.mark.parametrize("case", NOWHERE)\ndef test_x(case): pass\n', "NOWHERE"),
    ('@pytest.mark.probe("x", slow=True)\ndef test_x(): pass\n', "slow=True"),
    ('@pytest.mark.probe(NAME)\ndef test_x(): pass\n', "one string id"),
    ('def test_unmarked(): pass\n', "without @pytest.mark.probe"),
    ('@pytest.mark.probe("x")\n@pytest.mark.parametrize("a,b", [(1, 2)])\ndef test_x(a, b): pass\n', "one name"),
    ('@pytest.mark.probe("x", composite=1)\ndef test_x(): pass\n', "composite=1"),
    ('@pytest.mark.probe("x", contract=("call",))\ndef test_x(): pass\n', "contract=(kind, target)"),
    ('@pytest.mark.probe("x", contract=("calls", "a.b"))\ndef test_x(): pass\n', "kind one of call, config-key"),
    ('@pytest.mark.probe("x", variant="nowhere")\ndef test_x(): pass\n', "not a server-era variant"),
    ('@pytest.mark.probe("x", variant=NOWHERE)\ndef test_x(): pass\n', "variant=NOWHERE"),
    ('@pytest.mark.probe("x", variant="hybrid")\n@pytest.mark.parametrize("m", ["a"])\ndef test_x(m): pass\n',
     "name the variant per case"),
    ('@pytest.mark.probe("x", variant={"b": "hybrid"})\n@pytest.mark.parametrize("m", ["a"])\ndef test_x(m): pass\n',
     "cases ['b'] this probe does not have"),
])
def test_a_marker_it_cannot_read_is_refused_with_file_and_line(tmp_path, source, named):
    path = _write(tmp_path, "import pytest\n\n" + source)
    with pytest.raises(probe_catalog.CatalogError) as caught:
        probe_catalog.read_module(path)
    assert named in str(caught.value) and f"{path}:" in str(caught.value), caught.value


def test_a_probe_marked_data_in_one_test_only_is_refused(tmp_path, monkeypatch):
    path = _write(tmp_path, 'import pytest\n\n@pytest.mark.probe("x", data=True)\ndef test_a(): pass\n\n'
                            '@pytest.mark.probe("x")\n@pytest.mark.tp(2)\ndef test_b(): pass\n')
    monkeypatch.setattr(probe_catalog, "probes", lambda: tuple(probe_catalog.read_module(path)))
    with pytest.raises(probe_catalog.CatalogError, match="mark every test of a probe alike"):
        probe_catalog.ids_where("data")


def test_a_probe_whose_tests_name_different_contracts_is_refused(tmp_path, monkeypatch):
    path = _write(tmp_path, 'import pytest\n\n@pytest.mark.probe("x", contract=("call", "a.B"))\n'
                            'def test_a(): pass\n\n@pytest.mark.probe("x", contract=("call", "a.C"))\n'
                            '@pytest.mark.tp(2)\ndef test_b(): pass\n')
    monkeypatch.setattr(probe_catalog, "probes", lambda: tuple(probe_catalog.read_module(path)))
    with pytest.raises(probe_catalog.CatalogError, match="mark every test of a probe alike"):
        probe_catalog.contracts()
