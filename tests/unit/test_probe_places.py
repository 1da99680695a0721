"""Issue 31 item 3, probe facts on the probe: counts the places that spell a probe id.

Every fact the harness holds about a probe (its keys, data, advisory, composite, the server-era variant
it decides, the static contract it observes) is an option of its `@pytest.mark.probe` marker, read by
compat.shared.probe_catalog; adding a probe is its module and its row in docs/probes.md. So outside the
probe modules (compat/cell/probes/), no code, bench script or integration test holds a written-out list
of probe ids, and the few files that spell one probe id are the ones named here, each with why.

tests/unit is not counted: its literals are sample records and scenarios (what a cell reported), which
no probe added later has to join.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, Optional

import pytest

from compat.shared.probe_catalog import probe_keys, probes

ROOT = Path(__file__).resolve().parents[2]
PROBE_MODULES = "compat/cell/probes/"
IDS = frozenset(p.id for p in probes())
KEYS = frozenset(probe_keys())
ANY = None  # a place that may spell any probe id

# The files besides the probe modules that spell a probe id (a string literal that is one, or one's key).
PLACES: dict[str, Optional[frozenset[str]]] = {
    # the registry: each entry names the probe that sees its breakage
    "compat/shared/breakages.py": ANY,
    # each adapter is named by the breakage it fixes (the registry's ids, some of them their probe's)
    "compat/cell/adapters/generator.py": ANY,
    # CORE_PROBE_KEYS: the keys every schema-1 record held, history that no new probe changes
    "compat/shared/manifest.py": frozenset({
        "scheduler_config_fields", "kv_cache_config_api", "scheduler_signature", "request_signature",
        "block_hasher", "embed_input_ids", "two_phase_execute", "collective_rpc_unique_reply_rank",
        "aux_hidden_states_truthiness", "worker_logging", "hidden_states_match_reference",
        "extract_hidden_states_method", "hidden_states_connector", "payload_schema", "write_completion",
        "layer_numbering"}),
    # REFERENCE_PROBE: the probe whose case a breakage's `cases` pattern reads
    "compat/shared/breakage_model.py": frozenset({"hidden_states_match_reference"}),
    # fixture_of: a layer_ids_by_model case names the tiny model it compared
    "compat/harness/evidence.py": frozenset({"layer_ids_by_model"}),
    # ISOLATED_SINCE: history, which probe a fix isolated from which (a record older than the fix is labelled)
    "compat/harness/causes.py": frozenset({"block_hasher", "request_signature"}),
    # compat.harness.invariants: the main model's layer_ids_by_model run compares every server case
    "compat/harness/invariants.py": frozenset({"layer_ids_by_model"}),
    # vLLM's names that a probe is named after: Request(block_hasher=...), model.embed_input_ids
    "compat/cell/vllm_setup.py": frozenset({"block_hasher"}),
    "compat/shared/profiles.py": frozenset({"embed_input_ids"}),
    "compat/worker/adapter_extension.py": frozenset({"embed_input_ids"}),
    # bench scripts reading stored records
    "bench/diagnosis_time.py": frozenset({"hidden_states_match_reference"}),
    "bench/redteam_records.py": frozenset({"hidden_states_match_reference", "worker_logging", "workload_shapes",
                                          "output_token_rows"}),  # the edits of those probes' own evidence
    # the integration tests look up the probes whose measured findings they assert
    "tests/integration/test_default_matrix.py": ANY,
    "tests/integration/test_server_cells.py": ANY,
}
# Written-out collections of two or more probe ids or keys that stay, by the name they are assigned to.
LISTS_KEPT = {
    ("compat/shared/manifest.py", "CORE_PROBE_KEYS"): "what schema-1 records held: history, never grows",
    ("tests/integration/test_default_matrix.py", "BROKEN_ON_016_WITH_030"): "what one pair measured, per probe",
}


def _sources() -> Iterator[Path]:
    yield ROOT / "noxfile.py"
    for folder in ("compat", "bench", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            relative = path.relative_to(ROOT).as_posix()
            if not relative.startswith((PROBE_MODULES, "tests/unit/")):
                yield path


def _probe_id(node: ast.AST) -> Optional[str]:
    """The probe id a literal spells: "id", "id[case]", or ("id", case) as the integration tests key probes."""
    if isinstance(node, ast.Tuple) and node.elts:
        return _probe_id(node.elts[0])
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and (node.value in IDS or node.value in KEYS):
        return node.value.partition("[")[0]
    return None


def _spelled(tree: ast.Module) -> set[str]:
    return {pid for node in ast.walk(tree) if isinstance(node, ast.Constant) and (pid := _probe_id(node))}


def _hand_lists(tree: ast.Module) -> Iterator[tuple[str, int]]:
    """(the name a statement assigns, or "", line) of each literal collection of two or more probe ids."""
    for statement in tree.body:
        targets = statement.targets if isinstance(statement, ast.Assign) else \
            [statement.target] if isinstance(statement, ast.AnnAssign) else []
        name = next((t.id for t in targets if isinstance(t, ast.Name)), "")
        for node in ast.walk(statement):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                elements = list(node.elts)
            elif isinstance(node, ast.Dict):
                elements = [k for k in node.keys if k is not None]
            else:
                continue
            if sum(_probe_id(e) is not None for e in elements) >= 2:
                yield name, node.lineno


@pytest.fixture(scope="module")
def trees() -> dict[str, ast.Module]:
    return {path.relative_to(ROOT).as_posix(): ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
            for path in _sources()}


def test_no_list_of_probes_is_written_out_beside_the_probes(trees):
    found, kept = [], set()
    for relative, tree in trees.items():
        for name, line in _hand_lists(tree):
            if (relative, name) in LISTS_KEPT:
                kept.add((relative, name))
            else:
                found.append(f"{relative}:{line} {name}".rstrip())
    assert not found, ("probe ids written out as a list: mark the probes instead (@pytest.mark.probe options, "
                       "read by compat.shared.probe_catalog): " + "; ".join(found))
    assert kept == set(LISTS_KEPT), f"kept lists no longer there: {sorted(set(LISTS_KEPT) - kept)}"


def test_the_places_that_spell_a_probe_id_are_counted(trees):
    spelled = {relative: ids for relative, tree in trees.items() if (ids := _spelled(tree))}
    assert set(spelled) == set(PLACES), (
        f"new places that spell a probe id: {sorted(set(spelled) - set(PLACES))} (read the fact from the probe's "
        f"marker through compat.shared.probe_catalog); places gone: {sorted(set(PLACES) - set(spelled))}")
    for relative, allowed in PLACES.items():
        if allowed is not ANY:
            assert spelled[relative] == allowed, (relative, sorted(spelled[relative] ^ allowed))


def test_every_probe_is_where_adding_one_is_written():
    """The two files a new probe touches: its module (read for it) and its row in docs/probes.md."""
    table = (ROOT / "docs/probes.md").read_text(encoding="utf-8")
    assert all(p.where.startswith(PROBE_MODULES) for p in probes())
    assert all(f"| `{pid}`" in table for pid in IDS), sorted(pid for pid in IDS if f"| `{pid}`" not in table)
