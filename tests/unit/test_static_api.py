"""A vLLM release's API read with ast: re-exports, lazy tables, dataclass fields, inherited
__init__, class members along the bases, Python's binding rules, and moved names."""

from __future__ import annotations

import pytest

from compat.harness.static.api import Api, Param, Signature
from static_wheels import sources_of

VLLM = {
    "vllm/__init__.py": """
        MODULE_ATTRS = {"LLM": ".entrypoints.llm:LLM"}
        def __getattr__(name):
            ...
        """,
    "vllm/entrypoints/__init__.py": "",
    "vllm/entrypoints/llm.py": "class LLM:\n    def __init__(self, model, *, seed=0): ...\n",
    "vllm/config/__init__.py": """
        from typing import TYPE_CHECKING
        from vllm.config.scheduler import SchedulerConfig
        if TYPE_CHECKING:
            from vllm.config.hidden import OnlyForTypes
        """,
    "vllm/config/scheduler.py": """
        from dataclasses import InitVar, field
        from typing import ClassVar
        from vllm.config.utils import config

        @config
        class SchedulerConfig:
            max_model_len: InitVar[int]
            is_encoder_decoder: InitVar[bool]
            runner_type: str = "generate"
            max_num_seqs: int = field(default=128)
            queue: list = field(default_factory=list)
            internal: int = field(init=False)
            registry: ClassVar[dict] = {}
        """,
    "vllm/config/utils.py": "def config(cls):\n    return cls\n",
    "vllm/config/hidden.py": "class OnlyForTypes: ...\n",
    "vllm/v1/__init__.py": "",
    "vllm/v1/request.py": """
        import torch
        class Base:
            def __init__(self, request_id, prompt_token_ids, sampling_params=None):
                self.arrival = 0
            def _private(self, a, b=1): ...
            @staticmethod
            def _write(tensors, event, filename, lock_fd): ...
        class Request(Base):
            pass
        class Tensorish(torch.nn.Module):
            pass
        """,
    "vllm/v1/core/__init__.py": "",
    "vllm/v1/core/kv_cache_utils.py": "def init_none_hash(fn): ...\n",
    "vllm/v1/core/kv_cache_planning.py": "def get_kv_cache_config_from_groups(vllm_config, kv_cache_groups, "
                                         "available_memory):\n    ...\n",
}


@pytest.fixture()
def api(tmp_path):
    return Api(sources_of(tmp_path, "vllm", "9.0.0", VLLM))


def test_re_exports_resolve_to_the_definition(api):
    found = api.lookup("vllm.config.SchedulerConfig")
    assert (found.kind, found.file) == ("class", "vllm/config/scheduler.py")
    assert api.lookup("vllm.LLM").file == "vllm/entrypoints/llm.py"  # the lazy "module:attr" table


def test_a_type_checking_only_import_is_not_there_at_runtime(api):
    assert api.lookup("vllm.config.OnlyForTypes").kind == "missing"


def test_dataclass_fields_make_the_signature(api):
    signature = api.signature(api.lookup("vllm.config.SchedulerConfig"))
    assert signature.origin == "dataclass fields"
    assert [(p.name, p.required) for p in signature.params] == [
        ("max_model_len", True), ("is_encoder_decoder", True), ("runner_type", False),
        ("max_num_seqs", False), ("queue", False)]  # init=False and ClassVar left out
    assert signature.bind(0, ("max_model_len", "max_num_seqs")) == ["missing required argument(s) 'is_encoder_decoder'"]


def test_an_inherited_init_and_class_members(api):
    request = api.lookup("vllm.v1.request.Request")
    signature = api.signature(request)
    assert [p.name for p in signature.params] == ["request_id", "prompt_token_ids", "sampling_params"]
    assert signature.bind(0, ("request_id", "prompt_token_ids", "eos_token_id")) == [
        "unexpected keyword argument 'eos_token_id'"]
    private = api.lookup("vllm.v1.request.Request._private")
    assert private.kind == "function" and api.signature(private).text() == "(a, b=…)"  # self bound
    assert api.signature(api.lookup("vllm.v1.request.Request._write")).text() == "(tensors, event, filename, lock_fd)"
    assert api.lookup("vllm.v1.request.Request.arrival").kind == "variable"  # set on self in __init__
    assert api.lookup("vllm.v1.request.Request.nothing").kind == "missing"
    assert api.lookup("vllm.v1.request.Tensorish.forward").kind == "unknown"  # a base outside vLLM


def test_a_moved_function_is_found_where_it_is_defined_now(api):
    found = api.lookup("vllm.v1.core.kv_cache_utils.get_kv_cache_config_from_groups")
    assert found.kind == "missing"
    assert api.where_defined("get_kv_cache_config_from_groups") == ["vllm/v1/core/kv_cache_planning.py:1"]


@pytest.mark.parametrize("npos, keywords, star, starstar, problems", [
    (2, (), False, False, []),
    (3, (), False, False, ["takes 2 positional argument(s), 3 given"]),
    (1, ("a",), False, False, ["got multiple values for argument 'a'", "missing required argument(s) 'b'"]),
    (0, ("a", "b", "c"), False, False, ["unexpected keyword argument 'c'"]),
    (0, ("a",), False, True, []),  # **kwargs may supply b
    (0, ("a", "b", "k"), False, False, []),
])
def test_binding_follows_python(npos, keywords, star, starstar, problems):
    signature = Signature((Param("a", "pos", True), Param("b", "pos", True), Param("k", "kwonly", False)), "def")
    assert signature.bind(npos, keywords, star, starstar) == problems


def test_what_a_class_does_with_an_unknown_keyword_is_read_from_its_decorators(tmp_path):
    files = {
        "vllm/__init__.py": "",
        "vllm/old_utils.py": "def config(cls):\n    return cls\n",  # 0.11's @config: the class as is
        "vllm/new_utils.py": """
            from pydantic import ConfigDict
            from pydantic.dataclasses import dataclass
            def config(cls):
                return dataclass(cls, config=ConfigDict(extra="forbid"))
            """,
        "vllm/a.py": """
            import dataclasses
            from pydantic.dataclasses import dataclass
            from vllm.old_utils import config
            @config
            @dataclass
            class Old:
                x: int = 1
            @dataclasses.dataclass
            class Plain:
                x: int = 1
            """,
        "vllm/b.py": """
            from pydantic.dataclasses import dataclass
            from vllm.new_utils import config
            @config
            @dataclass
            class New:  # what forbids is in config's body
                x: int = 1
            """,
    }
    api = Api(sources_of(tmp_path, "vllm", "1.0.0", files))
    old, new, plain = (api.signature(api.lookup(n)) for n in ("vllm.a.Old", "vllm.b.New", "vllm.a.Plain"))
    assert (old.extra, new.extra, plain.extra) == ("ignored", "refused", "refused")
    assert old.bind(0, ("y",)) == [] and old.ignored(("x", "y")) == ["y"]
    assert new.bind(0, ("y",)) == ["unexpected keyword argument 'y'"]
