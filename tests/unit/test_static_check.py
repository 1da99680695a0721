"""A speculators release's uses of vLLM, checked against two fake vLLM releases: imports, calls,
methods on objects it built, overrides (private ones included), guarded imports, the verdict."""

from __future__ import annotations

import pytest

from compat.harness.static.api import Api
from compat.harness.static.check import Release, check_pair, check_pair_findings, verdict_of
from compat.harness.static.uses import uses_of
from static_wheels import sources_of

SPECULATORS = {
    "speculators/__init__.py": "",
    "speculators/gen.py": """
        from vllm.v1.request import Request
        from vllm.v1.executor import Executor
        try:
            from vllm.optional import Fancy
        except ImportError:
            Fancy = None

        def run(ids, eos):
            executor = Executor(tp=1)
            executor.collective_rpc("m", unique_reply_rank=0)
            return Request(request_id="r", prompt_token_ids=ids, eos_token_id=eos)
        """,
    "speculators/conn.py": """
        from vllm.connector import base as _base

        class Mine(_base.Connector):
            @staticmethod
            def _write_tensors(tensors, event, filename, lock_fd):
                ...

            def helper(self):
                return self._private(1)
        """,
}

OLD = {
    "vllm/__init__.py": "", "vllm/v1/__init__.py": "",
    "vllm/v1/request.py": "class Request:\n    def __init__(self, request_id, prompt_token_ids, eos_token_id=None): "
                          "...\n",
    "vllm/v1/executor.py": "class Executor:\n    def __init__(self, tp): ...\n    def collective_rpc(self, method, "
                           "unique_reply_rank=None): ...\n",
    "vllm/connector/__init__.py": "",
    "vllm/connector/base.py": "class Connector:\n    def _private(self, x): ...\n",
}
NEW = dict(OLD, **{
    "vllm/v1/request.py": "class Request:\n    def __init__(self, request_id, prompt_token_ids): ...\n",
    "vllm/v1/executor.py": "class Executor:\n    def __init__(self, tp): ...\n    def collective_rpc(self, method): "
                           "...\n",
    "vllm/connector/base.py": """
        class Connector:
            def _private(self, x): ...
            @staticmethod
            def _write_tensors(tensors, event, filename, lock_fd): ...
        """,
})


@pytest.fixture()
def release(tmp_path):
    spec = sources_of(tmp_path, "speculators", "1.0.0", SPECULATORS)
    return Release(spec, [], uses_of(spec, ("speculators",)))


def apis(tmp_path):
    return Api(sources_of(tmp_path, "vllm", "1.0.0", OLD)), Api(sources_of(tmp_path, "vllm", "2.0.0", NEW))


def test_the_uses_are_read_from_the_release(release):
    kinds = {(u.kind, u.target.split(".", 1)[1]) for u in release.uses}
    assert ("call", "v1.request.Request") in kinds
    assert ("method", "v1.executor.Executor.collective_rpc") in kinds  # on an object it built
    assert ("subclass", "connector.base.Connector") in kinds  # through a module alias
    assert ("override", "connector.base.Connector._write_tensors") in kinds  # private, static
    assert ("method", "connector.base.Connector._private") in kinds  # self._private(...) in the subclass
    assert [u.guarded for u in release.uses if u.target == "vllm.optional.Fancy"] == [True]


def test_each_release_gets_its_own_findings(tmp_path, release):
    old, new = apis(tmp_path)
    on_old = {f.use.id: f for f in check_pair_findings(release, old, reference=new)}
    on_new = {f.use.id: f for f in check_pair_findings(release, new, reference=new)}
    request = next(k for k in on_old if k.startswith("call:Request"))
    assert on_old[request].outcome == "ok"
    assert on_new[request].outcome == "broken" and "unexpected keyword argument 'eos_token_id'" in on_new[request].what
    assert on_new[request].line().startswith("vllm/v1/request.py:2: Request(")  # its __init__
    rpc = next(k for k in on_new if "collective_rpc" in k)
    assert on_new[rpc].outcome == "broken" and on_old[rpc].outcome == "ok"
    write = "override:vllm.connector.base.Connector._write_tensors"
    assert on_old[write].outcome == "broken" and "vLLM never calls the override" in on_old[write].what
    assert on_new[write].outcome == "ok"
    assert "override:vllm.connector.base.Connector.helper" not in on_new  # its own method, not a contract
    assert on_new["import:vllm.optional.Fancy"].outcome == "guarded"


def test_the_verdict_counts_breaks_only(tmp_path, release):
    old, new = apis(tmp_path)
    assert check_pair(release, new, new)["verdict"] == "api-incompatible"
    findings = [f for f in check_pair_findings(release, new, new) if f.outcome != "broken"]
    assert verdict_of(findings) == "api-compatible"  # guarded and unknown do not count


def test_serve_flags_and_config_keys_against_the_release(tmp_path):
    from compat.harness.static.serve import check_serve, serve_uses

    engine = """
        from dataclasses import dataclass
        @dataclass
        class EngineArgs:
            model: str = ""
            speculative_config: dict | None = None
            kv_transfer_config: dict | None = None
            enable_chunked_prefill: bool | None = None
        """
    config = """
        from dataclasses import dataclass
        from vllm.config.speculative import SpeculativeConfig
        @dataclass
        class KVTransferConfig:
            kv_connector: str | None = None
            kv_role: str | None = None
            kv_connector_extra_config: dict | None = None
        """
    speculative = """
        from dataclasses import dataclass
        from typing import Literal
        Methods = Literal["eagle3", "extract_hidden_states"]
        @dataclass
        class SpeculativeConfig:
            method: Methods | None = None
            num_speculative_tokens: int | None = None
            draft_model_config: object = None
        """
    factory = 'KVConnectorFactory.register_connector("ExampleHiddenStatesConnector", "m", "C")\n'
    files = {"vllm/__init__.py": "", "vllm/engine/__init__.py": "", "vllm/engine/arg_utils.py": engine,
             "vllm/config/__init__.py": config, "vllm/config/speculative.py": speculative,
             "vllm/distributed/__init__.py": "", "vllm/distributed/kv_transfer/__init__.py": "",
             "vllm/distributed/kv_transfer/kv_connector/__init__.py": "",
             "vllm/distributed/kv_transfer/kv_connector/factory.py": factory}
    new = Api(sources_of(tmp_path, "vllm", "2.0.0", files))
    old = Api(sources_of(tmp_path, "vllm", "1.0.0", dict(files, **{
        "vllm/config/speculative.py": speculative.replace(', "extract_hidden_states"', ""),
        "vllm/engine/arg_utils.py": engine.replace("            enable_chunked_prefill: bool | None = None\n", "")})))
    uses = serve_uses("0.6.0")
    assert {u.target for u in uses} >= {"--no-enable-chunked-prefill",
                                        "speculative_config.method=extract_hidden_states"}
    assert all(check_serve(u, new).outcome == "ok" for u in uses)
    broken = {u.target: check_serve(u, old) for u in uses if check_serve(u, old).outcome == "broken"}
    assert set(broken) == {"--no-enable-chunked-prefill", "speculative_config.method=extract_hidden_states"}
    assert serve_uses("0.4.0.1") == [] and "--no-enable-chunked-prefill" not in {u.target for u in serve_uses("0.9.0")}
