"""The Kimi suite's gate, options and model checks (no GPU, no vLLM)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from compat.cell import kimi_suite
from compat.harness import kimi
from compat.shared import gpus


def write_config(folder, **config):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(config))
    return folder


def test_defaults_are_the_seeds_pair_at_tp8(monkeypatch):
    monkeypatch.delenv(kimi.MODEL_VARIABLE, raising=False)
    options = kimi.parse_options([])
    assert (options.vllm, options.speculators, options.tp, options.model) == ("0.16.0", "0.3.0", 8, None)


def test_scale_model_defaults_to_tp2():
    assert kimi.parse_options(["--scale-model"]).tp == 2
    assert kimi.parse_options(["--scale-model", "--tp", "1"]).tp == 1


def test_model_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv(kimi.MODEL_VARIABLE, str(tmp_path))
    assert kimi.parse_options([]).model == tmp_path
    assert kimi.parse_options(["--model", "/x"]).model.as_posix() == "/x"


@pytest.mark.parametrize("argv", [["--tp", "0"], ["--scale-model", "--model", "/x"], ["--bogus"]])
def test_bad_options_exit_64(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        kimi.parse_options(argv)
    assert exc.value.code == 64


def test_kimi_layers():
    assert kimi.default_layers(61) == (2, 30, 58, 60)
    assert kimi.default_layers(7) == (2, 3, 4, 6)


def test_gate_needs_a_model_path():
    reason = kimi.gate_reason(None, 8, 8, "nvidia-smi -L")
    assert "no model path" in reason and kimi.MODEL_VARIABLE in reason


def test_gate_needs_tp_gpus(tmp_path):
    reason = kimi.gate_reason(tmp_path, 8, 2, "nvidia-smi -L")
    assert reason == "needs 8 visible GPUs for TP=8, found 2 (nvidia-smi -L)"
    assert kimi.gate_reason(tmp_path, 8, 8, "x") is None


def test_kimi_k25_config_reads_text_config(tmp_path):
    folder = write_config(tmp_path / "k25", architectures=["KimiK25ForConditionalGeneration"],
                          text_config={"num_hidden_layers": 61, "hidden_size": 7168})
    info = kimi.check_model(folder)
    assert (info.num_hidden_layers, info.hidden_size, info.layers) == (61, 7168, (2, 30, 58, 60))


@pytest.mark.parametrize("make, expected", [
    (lambda p: p / "missing", "is not a folder"),
    (lambda p: p, "has no readable config.json"),
    (lambda p: write_config(p / "nolayers", hidden_size=8), "num_hidden_layers=None"),
    (lambda p: write_config(p / "tiny", num_hidden_layers=4, hidden_size=8), "not four distinct"),
])
def test_wrong_model_is_named_with_what_was_expected(tmp_path, make, expected):
    folder = make(tmp_path)
    with pytest.raises(kimi.KimiError) as exc:
        kimi.check_model(folder)
    message = str(exc.value)
    assert expected in message and str(folder) in message and "2, 30, 58, 60" in message


def test_bad_json_config(tmp_path):
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(kimi.KimiError, match="not valid JSON"):
        kimi.check_model(tmp_path)


def test_host_gpu_count_without_nvidia_smi(monkeypatch):
    monkeypatch.setattr(gpus.shutil, "which", lambda name: None)
    assert gpus.host_gpu_count() == 0


def test_host_gpu_count_respects_visible_devices(monkeypatch):
    class Done:
        stdout = "\n".join(f"GPU {i}: NVIDIA RTX PRO 6000 (UUID: x)" for i in range(8))

    monkeypatch.setattr(gpus.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(gpus.subprocess, "run", lambda *a, **k: Done())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpus.host_gpu_count() == 8
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert gpus.host_gpu_count() == 2


def probe(pid, status, reason=None, **detail):
    return {"id": pid, "status": status, "reason": reason, "detail": detail}


def test_all_skipped_is_skipped_with_the_reason():
    status, reason = kimi.suite_status([probe("a", "skipped", "no model path"), probe("b", "skipped", "no model path")],
                                       None)
    assert (status, reason) == ("skipped", "no model path")


def test_a_broken_check_fails_the_suite():
    status, reason = kimi.suite_status([probe("a", "ok"), probe("b", "broken")], None)
    assert status == "failed" and "b: broken" in reason


def test_nothing_reported_is_an_error_not_a_pass():
    assert kimi.suite_status([], None)[0] == "error"
    assert kimi.suite_status([probe("a", "ok")], "timeout")[0] == "error"


def test_reference_only_skip_still_passes():
    assert kimi.suite_status([probe("a", "ok"), probe("ref", "n/a", "scale model only")], None) == ("ok", None)


def test_figures_are_lifted_from_details():
    found = kimi.figures([probe("perf", "ok", load_seconds=12.5, tokens_per_second=99.0, shapes=[1]),
                          probe("ref", "ok", max_abs_error_vs_reference=1e-6)])
    assert found == {"load_seconds": 12.5, "tokens_per_second": 99.0, "max_abs_error_vs_reference": 1e-6}


def test_suite_spec_carries_the_skip_reason(tmp_path):
    suite = kimi.suite_spec(None, 8, False, "needs 8 visible GPUs")
    assert suite.skip == "needs 8 visible GPUs" and suite.tp == 8
    info = kimi.ModelInfo(tmp_path, 61, 7168, (2, 30, 58, 60))
    suite = kimi.suite_spec(info, 8, False, None)
    assert suite.layers == (2, 30, 58, 60) and not suite.skip and suite.run_dtype == "auto"


def test_wrong_model_path_exits_64_and_records_the_error(tmp_path, capsys):
    code = kimi.main(["--model", str(tmp_path / "nope"), "--results", str(tmp_path / "r"),
                      "--reports", str(tmp_path / "o")])
    assert code == 64  # bad input: the usage code (issue 44)
    record = json.loads((tmp_path / "r" / "kimi.json").read_text())
    assert record["status"] == "error" and str(tmp_path / "nope") in record["reason"]
    assert "nope" in (tmp_path / "o" / "compat.md").read_text()


# --- MLA: on wherever the build has a backend for the model's latent ---------------------------

NO_CPU_MLA = {"CPU_MLA": {"missing": "vllm.v1.attention.backends.mla.cpu_mla.CPUMLABackend: ModuleNotFoundError"}}
CPU_MLA_032 = {"CPU_MLA": {"head_sizes": [576], "dtypes": ["float16", "bfloat16", "float32"]}}
# what detection reads off official 0.22.1: TritonMLABackend lists none, MLACommonBackend [320, 576]
TRITON_MLA = {"TRITON_MLA": {"head_sizes": [320, 576], "dtypes": ["float16", "bfloat16"]}}


def test_mla_off_where_the_cpu_build_has_no_mla_backend():
    choice = kimi.choose_mla(NO_CPU_MLA, 96)
    assert not choice.enabled and choice.dtype == "float32"
    assert choice.reason.startswith("MLA off (VLLM_MLA_DISABLE=1): this vLLM build has no usable MLA attention backend")
    assert "cpu_mla" in choice.reason
    assert "VLLM_MLA_DISABLE=1" in choice.reason


def test_mla_off_where_the_latent_does_not_fit_and_the_fixture_option_is_named():
    choice = kimi.choose_mla(CPU_MLA_032, 96)
    assert not choice.enabled and "[576] only; this model's is 96" in choice.reason
    assert "--mla-fixture" in choice.reason


def test_mla_on_for_a_latent_of_576_on_cpu_in_float32():
    choice = kimi.choose_mla(CPU_MLA_032, 576)
    assert choice.enabled and choice.dtype == "float32" and choice.latent == 576


def test_mla_on_on_gpu_in_bfloat16_since_no_gpu_mla_kernel_takes_float32():
    choice = kimi.choose_mla(TRITON_MLA, 576)
    assert choice.enabled and choice.dtype == "bfloat16" and "no float32" in choice.reason
    assert kimi.choose_mla(TRITON_MLA, 576, "bfloat16").enabled
    assert not kimi.choose_mla(TRITON_MLA, 96).enabled


def test_float32_asked_for_where_mla_takes_none_turns_mla_off_and_says_why():
    choice = kimi.choose_mla(TRITON_MLA, 576, "float32")
    assert not choice.enabled and choice.dtype == "float32" and "--dtype float32" in choice.reason


def test_a_model_without_mla():
    assert not kimi.choose_mla(TRITON_MLA, None).enabled


def test_mla_latent_reads_top_level_or_text_config(tmp_path):
    top = write_config(tmp_path / "a", kv_lora_rank=512, qk_rope_head_dim=64, num_hidden_layers=7)
    nested = write_config(tmp_path / "b", text_config={"kv_lora_rank": 64, "qk_rope_head_dim": 32,
                                                       "num_hidden_layers": 7})
    plain = write_config(tmp_path / "c", num_hidden_layers=7)
    assert [kimi.mla_latent(p / "config.json") for p in (top, nested, plain)] == [576, 96, None]


def test_suite_environment_turns_mla_on_or_off_explicitly():
    on = kimi.MlaChoice(True, "MLA on", "bfloat16", 96)
    assert kimi.suite_environment(on) == {"VLLM_MLA_DISABLE": "0"}
    assert kimi.suite_spec(None, 2, True, None, on).run_dtype == "bfloat16"
    off = kimi.MlaChoice(False, "no backend", "float32", 96)
    assert kimi.suite_environment(off)["VLLM_MLA_DISABLE"] == "1"
    assert kimi.suite_spec(None, 2, True, None, off).run_dtype == "float32"  # the scale model, MLA off
    assert kimi.suite_spec(None, 8, False, None, on).run_dtype == "auto"  # Kimi: "auto"


@pytest.mark.parametrize("argv", [["--mla-fixture"], ["--dtype", "float32"],
                                  ["--python", "/bin/sh", "--vllm", "0.16.0"], ["--python", "/nonexistent/python"]])
def test_variant_and_interpreter_options_are_checked(argv):
    with pytest.raises(SystemExit) as exc:
        kimi.parse_options(argv)
    assert exc.value.code == 64


def test_python_option_keeps_versions_from_the_interpreter():
    options = kimi.parse_options(["--scale-model", "--python", "/bin/sh"])
    assert options.python.as_posix() == "/bin/sh"


def test_an_interpreter_without_vllm_is_refused_with_what_was_found():
    import sys

    with pytest.raises(kimi.KimiError) as exc:
        kimi.cell_over_interpreter(sys.executable, "cpu")
    assert f"--python {sys.executable}: found vllm None" in str(exc.value)
    assert "expected an interpreter with both installed" in str(exc.value)


# --- the tokenizer: trust_remote_code, as Kimi's custom tokenizer needs -------------------------

class RecordingAutoTokenizer:
    calls: list = []

    @classmethod
    def from_pretrained(cls, *args, **kwargs):
        cls.calls.append((args, kwargs))
        return "tokenizer"


def release_module():
    """speculators 0.3.0/0.4.0.1's generator module, as far as the tokenizer goes."""
    import types

    module = types.SimpleNamespace(AutoTokenizer=RecordingAutoTokenizer)

    class VllmHiddenStatesGenerator:
        def __init__(self, model_path):
            self.tokenizer = module.AutoTokenizer.from_pretrained(model_path)  # line 84 / 90

    module.VllmHiddenStatesGenerator = VllmHiddenStatesGenerator
    return module


def test_the_suite_builds_the_generator_with_a_tokenizer_that_trusts_remote_code():
    RecordingAutoTokenizer.calls = []
    module, applied = release_module(), []
    with kimi_suite.tokenizer_trusting_remote_code(module, applied):
        module.VllmHiddenStatesGenerator("/models/Kimi-K2.5")
    assert RecordingAutoTokenizer.calls == [(("/models/Kimi-K2.5",), {"trust_remote_code": True})]
    assert applied == [kimi_suite.TOKENIZER_FIX] and "tokenization_kimi.py" in applied[0]["why"]
    assert module.AutoTokenizer is RecordingAutoTokenizer  # restored after the build


def test_without_the_fix_the_release_asks_for_no_remote_code():
    RecordingAutoTokenizer.calls = []
    release_module().VllmHiddenStatesGenerator("/models/Kimi-K2.5")
    assert RecordingAutoTokenizer.calls == [(("/models/Kimi-K2.5",), {})]


def test_a_release_that_decides_trust_remote_code_itself_is_left_alone():
    RecordingAutoTokenizer.calls = []
    module, applied = release_module(), []
    with kimi_suite.tokenizer_trusting_remote_code(module, applied):
        module.AutoTokenizer.from_pretrained("/m", trust_remote_code=False)
    assert RecordingAutoTokenizer.calls == [(("/m",), {"trust_remote_code": False})] and applied == []


def test_the_kimi_conftest_builds_through_the_fix():
    """The suite's one generator build is inside the fix (compat/cell/probes/kimi/conftest.py)."""
    from pathlib import Path

    source = (Path(kimi.REPO_ROOT) / kimi.SUITE / "conftest.py").read_text()
    build = source.index("datagen.build(")
    assert source.rindex("with kimi_suite.tokenizer_trusting_remote_code(datagen.generator_module()", 0, build) > 0


def test_mla_detection_takes_the_common_mla_head_sizes_where_the_backend_lists_none(tmp_path, monkeypatch):
    """vLLM 0.22.1's TritonMLABackend lists no head sizes, yet MLA's metadata refuses all but
    MLACommonBackend's [320, 576] ('Head dimension 96 is not supported by MLA.', seen on an H200)."""
    files = {
        "vllm/__init__.py": "",
        "vllm/model_executor/__init__.py": "",
        "vllm/model_executor/layers/__init__.py": "",
        "vllm/model_executor/layers/attention/__init__.py": "",
        "vllm/model_executor/layers/attention/mla_attention.py":
            "class MLACommonBackend:\n    @classmethod\n    def get_supported_head_sizes(cls):\n        return [320, "
            "576]\n",
        "vllm/v1/__init__.py": "", "vllm/v1/attention/__init__.py": "",
        "vllm/v1/attention/backends/__init__.py": "", "vllm/v1/attention/backends/mla/__init__.py": "",
        "vllm/v1/attention/backends/mla/triton_mla.py":
            "class TritonMLABackend:\n    supported_dtypes = ['torch.bfloat16']\n"
            "    @classmethod\n    def get_supported_head_sizes(cls):\n        return []\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    found = kimi.detect_mla_backends(Path(sys.executable), "gpu")
    assert found["TRITON_MLA"]["head_sizes"] == [320, 576]
    assert not kimi.choose_mla(found, 96).enabled
    assert kimi.choose_mla(found, 576).enabled
