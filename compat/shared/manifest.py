"""What a cell is expected to report: every probe key the suites hold, and which probe a
server-era variant decides. The runner writes it into each record (`manifest`); the report works
it out again from the record's spec and compares (compat.harness.evidence).

tests/integration/test_default_matrix.py holds the keys against what the matrix really reported;
tests/unit/test_probe_catalog.py holds that every variant's key is a probe's.
"""

from __future__ import annotations

import functools
from typing import Any, Iterable, Optional

from compat.shared.probe_catalog import probe_keys, probe_set, variant_keys

# The 21 keys every record has held since the server era began (schema 1 included).
CORE_PROBE_KEYS = (
    "scheduler_config_fields", "kv_cache_config_api", "scheduler_signature", "request_signature",
    "block_hasher", "embed_input_ids", "two_phase_execute", "collective_rpc_unique_reply_rank[tp1]",
    "collective_rpc_unique_reply_rank[tp2]", "aux_hidden_states_truthiness", "worker_logging",
    "hidden_states_match_reference[batch]", "hidden_states_match_reference[repeated]",
    "hidden_states_match_reference[shared_prefix]", "hidden_states_match_reference[multi_step]",
    "hidden_states_match_reference[tp2]", "extract_hidden_states_method", "hidden_states_connector",
    "payload_schema", "write_completion", "layer_numbering",
)
# Each probe key a server-era variant decides (compat.cell.server_models.VARIANTS), and that variant: marked
# @pytest.mark.probe(..., variant=...).
VARIANT_OF_KEY = variant_keys()
# Every key a cell reports, read from the probes' own markers (compat.shared.probe_catalog), and the
# probe set they make (a probe marked since=N joined set N; records say theirs: `manifest.probe_set`).
PROBE_KEYS = probe_keys()
PROBE_SET = probe_set()


def expected_manifest(variants: Optional[Iterable[str]], probe_set: int = PROBE_SET) -> dict[str, Any]:
    """The manifest of a cell whose spec selects these variants (None: every variant), written by a runner
    with this probe set (a record without `probe_set` was written with set 0)."""
    out: dict[str, Any] = {"probes": list(probe_keys(probe_set)),
                           "variants": None if variants is None else sorted(variants)}
    return {**out, "probe_set": probe_set} if probe_set else out


@functools.lru_cache(maxsize=None)
def variants_of(probe_set: int = PROBE_SET) -> tuple[str, ...]:
    """The server-era variants a runner of this probe set served when a cell named none (every one whose probe
    key is in the set): a record that lists exactly these selected every variant of its time."""
    keys = set(probe_keys(probe_set))
    return tuple(dict.fromkeys(name for key, name in VARIANT_OF_KEY.items() if key in keys))


def variant_deciding(key: str) -> Optional[str]:
    """The server-era variant this probe key decides (its marker's `variant`), None where it decides none."""
    return VARIANT_OF_KEY.get(key)


def deselected(key: str, variants: Optional[Iterable[str]]) -> bool:
    """Whether the spec left out the variant this probe key decides (only then may it be `not selected`)."""
    variant = variant_deciding(key)
    return variant is not None and variants is not None and variant not in set(variants)
