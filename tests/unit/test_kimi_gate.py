"""The Kimi suite's gate, options and model checks (no GPU, no vLLM)."""

from __future__ import annotations

import json

import pytest

from compat import kimi


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
def test_bad_options_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        kimi.parse_options(argv)
    assert exc.value.code == 2


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
    monkeypatch.setattr(kimi.shutil, "which", lambda name: None)
    assert kimi.host_gpu_count() == 0


def test_host_gpu_count_respects_visible_devices(monkeypatch):
    class Done:
        stdout = "\n".join(f"GPU {i}: NVIDIA RTX PRO 6000 (UUID: x)" for i in range(8))

    monkeypatch.setattr(kimi.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    monkeypatch.setattr(kimi.subprocess, "run", lambda *a, **k: Done())
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert kimi.host_gpu_count() == 8
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert kimi.host_gpu_count() == 2


def probe(pid, status, reason=None, **detail):
    return {"id": pid, "status": status, "reason": reason, "detail": detail}


def test_all_skipped_is_skipped_with_the_reason():
    status, reason = kimi.suite_status([probe("a", "skipped", "no model path"), probe("b", "skipped", "no model path")], None)
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


def test_suite_environment_carries_the_skip_reason(tmp_path):
    env = kimi.suite_environment(None, 8, False, "needs 8 visible GPUs")
    assert env["COMPAT_KIMI_SKIP"] == "needs 8 visible GPUs" and env["COMPAT_KIMI_TP"] == "8"
    info = kimi.ModelInfo(tmp_path, 61, 7168, (2, 30, 58, 60))
    env = kimi.suite_environment(info, 8, False, None)
    assert env["COMPAT_KIMI_LAYERS"] == "2,30,58,60" and "COMPAT_KIMI_SKIP" not in env


def test_wrong_model_path_exits_2_and_records_the_error(tmp_path, capsys):
    code = kimi.main(["--model", str(tmp_path / "nope"), "--results", str(tmp_path / "r"),
                      "--reports", str(tmp_path / "o")])
    assert code == 2
    record = json.loads((tmp_path / "r" / "kimi.json").read_text())
    assert record["status"] == "error" and str(tmp_path / "nope") in record["reason"]
    assert "nope" in (tmp_path / "o" / "compat.md").read_text()
