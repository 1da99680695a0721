"""The server-era `layer_numbering` probe's own check, on files written here from the tiny Llama's transformers
reference (compat/cell/probes/server/test_server_probes.py): right ids pass; a file with another layer count, on
every sequence or one, and swapped ids are a ContractViolation, never a pass. Needs torch, transformers and
safetensors: run in a cell venv (`nox -s tests` runs it with the Kimi suite's cell interpreter):

    .venvs/vllm-0.32.0__speculators-0.9.0__cpu/bin/python -m pytest tests/cell
"""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs torch: run tests/cell with a cell venv's interpreter")

from compat.cell.probes.server.test_server_probes import layer_numbering  # noqa: E402
from compat.cell.reference import load_reference_model, reference_states  # noqa: E402
from compat.cell.server_mode_runs import ModeRun  # noqa: E402
from compat.fixtures import tiny_llama  # noqa: E402
from compat.shared.observe import ContractViolation  # noqa: E402

IDS = [1, 3, 5, 6]
PROMPTS = [[5, 17, 99, 3, 42, 8, 11, 250], [7, 7, 64, 1, 90]]


@pytest.fixture(scope="module")
def model():
    return load_reference_model(str(tiny_llama.ensure()))


def written(tmp_path: Path, model, layers_per_sequence: list[list[int]]) -> ModeRun:
    """A raw run whose batch case wrote, per prompt, the reference states at the given indexes."""
    from safetensors.torch import save_file

    tables = reference_states(model, PROMPTS)
    run = ModeRun(mode="raw", serve_args=[], server_log=tmp_path / "server.log")
    items = []
    for s, (prompt, indexes) in enumerate(zip(PROMPTS, layers_per_sequence)):
        path = tmp_path / f"hs_{s}.safetensors"
        save_file({"hidden_states": torch.stack([tables[s][i] for i in indexes], dim=1).contiguous(),
                   "token_ids": torch.tensor(prompt)}, str(path))
        items.append((prompt, path))
    run.files["batch"] = items
    return run


def test_right_ids_pass_and_say_which_index_each_id_is(tmp_path, model):
    detail: dict = {}
    layer_numbering(written(tmp_path, model, [IDS, IDS]), IDS, model, "float32", detail)
    assert detail["id_to_reference_index"] == {str(k): [k] for k in IDS}
    assert detail["num_layers_id"]["is"] == "pre-norm"


@pytest.mark.parametrize("layers", [[IDS + [2], IDS + [2]], [IDS, IDS + [2]], [IDS[:3], IDS[:3]]],
                         ids=["one layer more, every sequence", "one layer more, one sequence", "one layer fewer"])
def test_a_file_with_another_layer_count_is_a_violation_not_a_pass(tmp_path, model, layers):
    with pytest.raises(ContractViolation, match="rows compared"):
        layer_numbering(written(tmp_path, model, layers), IDS, model, "float32", {})


def test_swapped_ids_are_a_violation(tmp_path, model):
    swapped = [1, 5, 3, 6]
    with pytest.raises(ContractViolation, match="layer id -> reference index"):
        layer_numbering(written(tmp_path, model, [swapped, swapped]), IDS, model, "float32", {})
