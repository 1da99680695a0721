"""compat.cell.extraction: the launch configuration of each speculators release, as arguments."""

from __future__ import annotations

import json
from pathlib import Path

from compat.cell.extraction import NO_CHUNKED_PREFILL, SHIM_MODULE, has_cli, layer_ids, serve_args, write_rows


def _config(args: list[str], flag: str) -> dict:
    return json.loads(args[args.index(flag) + 1])


def test_layer_ids_are_distinct_and_include_num_layers():
    assert layer_ids(6) == [1, 3, 5, 6]
    assert layer_ids(32)[-1] == 32


def test_serve_args_match_launch_vllm():
    args = serve_args("0.9.0", [1, 3, 5, 6], Path("/tmp/hs"))
    spec = _config(args, "--speculative_config")
    assert spec == {"method": "extract_hidden_states", "num_speculative_tokens": 1,
                    "draft_model_config": {"hf_config": {"eagle_aux_hidden_state_layer_ids": [1, 3, 5, 6]}}}
    transfer = _config(args, "--kv_transfer_config")
    assert transfer == {"kv_connector": "ExampleHiddenStatesConnector", "kv_role": "kv_producer",
                        "kv_connector_extra_config": {"shared_storage_path": "/tmp/hs"}}
    assert NO_CHUNKED_PREFILL not in args
    assert args[-5:] == ["--dtype", "float32", "--enforce-eager", "--max-model-len", "256"]


def test_releases_0_6_and_0_7_disable_chunked_prefill_themselves():
    assert NO_CHUNKED_PREFILL in serve_args("0.6.0.1", [1], Path("/x"))
    assert NO_CHUNKED_PREFILL in serve_args("0.7.0.2", [1], Path("/x"))
    assert NO_CHUNKED_PREFILL not in serve_args("0.5.0", [1], Path("/x"))
    assert serve_args("0.7.0", [1], Path("/x"), extra_flags=[NO_CHUNKED_PREFILL]).count(NO_CHUNKED_PREFILL) == 1


def test_shim_is_loaded_by_module_path():
    transfer = _config(serve_args("0.8.1", [1], Path("/x"), shim=True), "--kv_transfer_config")
    assert transfer["kv_connector"] == "ExampleHiddenStatesConnector"
    assert transfer["kv_connector_module_path"] == SHIM_MODULE


def test_cli_from_0_8():
    assert not has_cli("0.7.0.2")
    assert has_cli("0.8.0") and has_cli("0.9.0")


def test_rows_are_pretokenized(tmp_path):
    write_rows(tmp_path / "rows.jsonl", [[5, 6, 7]])
    assert json.loads((tmp_path / "rows.jsonl").read_text()) == {"input_ids": [5, 6, 7], "loss_mask": [1, 1, 1]}


def test_chosen_flags_are_added_once():
    args = serve_args("0.8.1", [1, 3, 5, 6], Path("/tmp/hs"), shim=True,
                      extra_flags=[NO_CHUNKED_PREFILL, "--no-enable-prefix-caching"])
    assert args.count(NO_CHUNKED_PREFILL) == 1 and args.count("--no-enable-prefix-caching") == 1
    assert "--no-enable-prefix-caching" not in serve_args("0.8.1", [1, 3, 5, 6], Path("/tmp/hs"))


def test_a_variant_never_starts_beside_a_main_server_started_early(tmp_path, monkeypatch):
    """One server at a time (official 0.24.0 on an H200, sixth session: a variant's probe run again alone started
    its server while the main raw server, started early, was still up, and vLLM refused for GPU memory). A variant's
    run first serves and stops the main runs already started; nothing else of the main is started for it."""
    from compat.cell import server_mode_runs
    from compat.cell.server_mode_runs import Extraction, Launch, ModeRun
    from compat.shared.cell_spec import CellSpec

    events: list[str] = []

    class Server:
        def __init__(self, name):
            self.name, self.ready_seconds, self.process = name, 0.0, None

        def start(self):
            events.append(f"{self.name} up")

        def stop(self):
            events.append(f"{self.name} down")

        def log_text(self):  # what the run keeps of its server's log: the weights it skipped at load
            return f"WARNING Parameter {self.name.replace(' ', '_')}.w not found in params_dict, skip loading\n"

        def alive(self):
            return False

    def launch(self, mode):
        run = ModeRun(mode, [], tmp_path / f"{self.name or 'main'}-{mode}.log")
        return Launch(run, Server(f"{self.name or 'main'} {mode}"), tmp_path, mode)

    monkeypatch.setattr(Extraction, "_launch", launch)
    monkeypatch.setattr(server_mode_runs, "model_runner", lambda text: {})
    spec = CellSpec(cell_id="c", vllm="0.24.0", speculators="0.9.0", backend="gpu", model_dir=str(tmp_path),
                    work_dir=str(tmp_path / "cell"), dtype="float32")
    main = Extraction(str(tmp_path), "0.9.0", [1], spec, cases=())
    variant = Extraction(str(tmp_path), "0.9.0", [0, 1], spec, variant=type("V", (), {"name": "hybrid"})(),
                         follows=main, cases=())
    main.start("raw")
    variant.get("raw")
    assert events == ["main raw up", "main raw down", "hybrid raw up", "hybrid raw down"], events
    assert set(main.runs) == {"raw"}  # no other main run was started for the variant's raw run
    assert main.runs["raw"].skipped_weights == ["main_raw.w"]
