"""The reports a cell's interpreter prints for the harness, run as modules (`python -m compat.cell.mla_report`,
`python -m compat.cell.env_report`; tests/unit/test_server_models.py runs the environment report through
compat.harness.cell_envs.describe_python). The dev environment has no vLLM or torch: a stand-in vLLM tree, written
here, answers the MLA report's questions (backends, MLACommonBackend's head sizes, the prefill kernel registry and
the head dims each kernel takes); what a real build answers is the GPU and CPU rows' business."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from compat.harness.cell_envs import REPO_ROOT
from compat.shared.mla import MLA_BACKENDS, PREFILL_DIMS, choose_mla, prefill_takes

REGISTRY = """import enum
class _Kernel:
    def __init__(self, available, dims):
        self.available, self.dims = available, dims
    def is_available(self):
        return self.available
    def supports_compute_capability(self, capability):
        return True
    def supports_mla_dimensions(self, d):
        return (d.qk_nope_head_dim, d.qk_rope_head_dim, d.v_head_dim) in self.dims
class MLAPrefillBackendEnum(enum.Enum):
    FLASH_ATTN = 1
    FLASHINFER = 2
    def get_class(self):
        if self.name == "FLASHINFER":
            raise ImportError("no flashinfer")
        return _Kernel(True, {(128, 64, 128)})
"""
STAND_IN = {
    "vllm/model_executor/layers/attention/mla_attention.py":
        "class MLACommonBackend:\n    @classmethod\n    def get_supported_head_sizes(cls):\n"
        "        return [320, 576]\n",
    "vllm/v1/attention/backends/mla/cpu_mla.py":
        "print('vLLM says something on import')\nclass CPUMLABackend:\n    supported_dtypes = ['torch.float32']\n"
        "    @classmethod\n    def get_supported_head_sizes(cls):\n        return [576, 1024]\n",
    "vllm/v1/attention/backends/mla/prefill/registry.py": REGISTRY,
    "vllm/v1/attention/backends/mla/prefill/base.py":
        "from collections import namedtuple\n"
        "MLADimensions = namedtuple('MLADimensions', 'qk_nope_head_dim qk_rope_head_dim v_head_dim')\n",
}
CPU_LINE = ('{"CPU_MLA": {"head_sizes": [576], "dtypes": ["float32"], "prefill": ["FLASH_ATTN"], '
            '"prefill_dims": {"FLASH_ATTN": [[128, 64, 128]]}}}')


def stand_in_vllm(root: Path) -> Path:
    for name, text in STAND_IN.items():
        path = root / name
        for parent in path.relative_to(root).parents:
            if parent != Path("."):
                (root / parent).mkdir(parents=True, exist_ok=True)
                (root / parent / "__init__.py").touch()
        path.write_text(text)
    return root


def run_module(args: list[str], path: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    """The module in a fresh interpreter, the checkout and `path` on PYTHONPATH, as the harness runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(path)])}
    return subprocess.run([sys.executable, "-m", *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120)


def test_the_mla_report_prints_what_each_backend_and_prefill_kernel_takes(tmp_path):
    vllm = stand_in_vllm(tmp_path / "site")
    dims = json.dumps([list(d) for d in PREFILL_DIMS])
    out = run_module(["compat.cell.mla_report", json.dumps(MLA_BACKENDS["cpu"]), dims], vllm, tmp_path)
    assert out.returncode == 0, out.stderr
    # what vLLM prints on import comes first; the harness reads the last line
    assert out.stdout == "vLLM says something on import\n" + CPU_LINE + "\n"
    found = json.loads(out.stdout.splitlines()[-1])
    assert choose_mla(found, 576).enabled and not choose_mla(found, 96).enabled
    assert prefill_takes(found, (128, 64, 128))[0] and not prefill_takes(found, (32, 64, 32))[0]
    # without DIMS (the Kimi suite's call) no kernel is asked about head dims
    out = run_module(["compat.cell.mla_report", json.dumps(MLA_BACKENDS["cpu"])], vllm, tmp_path)
    assert "prefill_dims" not in json.loads(out.stdout.splitlines()[-1])["CPU_MLA"]


def test_the_mla_report_says_why_a_backend_is_missing(tmp_path):
    out = run_module(["compat.cell.mla_report", json.dumps(MLA_BACKENDS["gpu"])], tmp_path, tmp_path)
    assert out.stdout == ('{"TRITON_MLA": {"missing": "TRITON_MLA (vllm.v1.attention.backends.mla.triton_mla): '
                          'ModuleNotFoundError: No module named \'vllm\'"}}\n')
    assert not choose_mla(json.loads(out.stdout), 576).enabled


def test_backends_here_answers_in_the_cell_without_vllms_import_noise(tmp_path):
    vllm = stand_in_vllm(tmp_path / "site")
    code = "import json; from compat.cell.mla_report import backends_here; print(json.dumps(backends_here('cpu')))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), str(vllm)])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout == CPU_LINE + "\n"


@pytest.mark.parametrize("module", ["compat.cell.mla_report", "compat.cell.env_report"])
def test_the_cell_reports_import_nothing_but_the_standard_library_and_shared(module):
    """Run in an interpreter that may hold no vLLM (an --python PATH being inspected): importing the module
    loads nothing of the harness, vLLM or torch."""
    code = (f"import sys, {module}; print(sorted(m for m in sys.modules "
            "if m.split('.')[0] in ('vllm', 'torch') or m.startswith('compat.harness')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120)
    assert out.stdout.strip() == "[]", out.stderr
