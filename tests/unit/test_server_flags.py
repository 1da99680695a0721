"""The server-era with_compat flags are chosen from what a run observed (the server's refusal,
rows missing on prefix-cached prompts), never from a version range."""

import json
import struct
from pathlib import Path

import pytest

from compat.cell.extraction import NO_CHUNKED_PREFILL, NO_PREFIX_CACHING
from compat.cell.server_mode_runs import PROMPTS, ModeRun, data_flags, file_rows, refusal_flags
from compat.shared.observe import ContractViolation

REFUSAL = ("vllm serve exited 1 before it was ready: Value error, ExampleHiddenStatesConnector does not support "
           "chunked prefill. Please disable chunked prefill (--no-enable-chunked-prefill).")
SHORT = ("speculators generate-offline-data exited 1: ValueError: Sequence length of hidden states 72 doesn't "
         "match num tokens 200")


def hidden_states_file(path: Path, rows: int) -> Path:
    """A safetensors file whose header says hidden_states is [rows, 4, 8] (data left out: only
    the header is read)."""
    header = json.dumps({"hidden_states": {"dtype": "F32", "shape": [rows, 4, 8], "data_offsets": [0, 0]}}).encode()
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    return path


def run_with_files(tmp_path, rows_by_case: dict[str, list[int]]) -> ModeRun:
    run = ModeRun("api_only", [], tmp_path / "log")
    for case, rows in rows_by_case.items():
        run.files[case] = [(PROMPTS[case][i], hidden_states_file(tmp_path / f"{case}-{i}.safetensors", n))
                           for i, n in enumerate(rows)]
    return run


def full(case):
    return [len(p) for p in PROMPTS[case]]


def test_a_chunked_prefill_refusal_chooses_the_flag_and_says_why(tmp_path):
    run = ModeRun("raw", [], tmp_path / "log", failure=ContractViolation(REFUSAL))
    flags = refusal_flags(run)
    assert list(flags) == [NO_CHUNKED_PREFILL] and "does not support chunked prefill" in flags[NO_CHUNKED_PREFILL]
    assert refusal_flags(ModeRun("raw", [], tmp_path / "log", failure=ContractViolation("CUDA error"))) == {}
    assert refusal_flags(ModeRun("raw", [], tmp_path / "log")) == {}


def test_rows_missing_on_prefix_cached_prompts_choose_no_prefix_caching(tmp_path):
    run = run_with_files(tmp_path, {"batch": full("batch"), "repeated": [8, 40, 72],
                                    "shared_prefix": full("shared_prefix")})
    flags = data_flags(run)
    assert list(flags) == [NO_PREFIX_CACHING]
    assert "repeated/repeated-2.safetensors: 72 of 200 rows" in flags[NO_PREFIX_CACHING]


def test_the_client_refusing_short_files_counts_as_missing_rows(tmp_path):
    run = run_with_files(tmp_path, {"batch": full("batch")})
    run.case_failures["shared_prefix"] = ContractViolation(f"[shared_prefix] {SHORT}")
    assert list(data_flags(run)) == [NO_PREFIX_CACHING]


@pytest.mark.parametrize("rows_by_case", [
    {"batch": full("batch"), "repeated": full("batch"), "shared_prefix": full("shared_prefix")},  # all there
    {"batch": [8, 40, 100], "repeated": [8, 40, 72]},  # short before anything was cached: not prefix caching
])
def test_no_flag_without_rows_missing_on_cached_prompts_alone(tmp_path, rows_by_case):
    assert data_flags(run_with_files(tmp_path, rows_by_case)) == {}


def test_a_run_that_failed_observes_no_data(tmp_path):
    run = run_with_files(tmp_path, {"batch": full("batch"), "repeated": [8, 40, 72]})
    run.failure = ContractViolation(REFUSAL)
    assert data_flags(run) == {}


def test_file_rows_reads_the_header(tmp_path):
    assert file_rows(hidden_states_file(tmp_path / "a.safetensors", 37)) == 37
    assert file_rows(tmp_path / "missing.safetensors") is None
