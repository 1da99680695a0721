"""Break each rule of the static layer on purpose and check that a unit test fails (a check that
cannot fail is a defect). Each mutation is applied to the file, the named tests run, the file
restored. Run from anywhere: `python bench/static_rules.py`; prints CAUGHT or SURVIVED per rule.
"""
import pathlib
import subprocess
import sys

R = pathlib.Path(__file__).resolve().parents[1]
M = [
 ("compat/harness/static/sources.py", 'return name.endswith(".py") or', 'return True or', "test_static_sources.py",
  "fetch only .py members"),
 ("compat/harness/static/sources.py", "if zlib.crc32(data) != self.crc:", "if False:", "test_static_sources.py",
  "CRC check after extraction"),
 ("compat/harness/static/api.py", "elif kw not in names and not varkw and self.extra != \"ignored\":", "elif False:",
  "test_static_api.py test_static_check.py", "unexpected keyword"),
 ("compat/harness/static/api.py", "init = not (isinstance(init_kw, ast.Constant) and init_kw.value is False)",
  "init = True", "test_static_api.py", "field(init=False) excluded"),
 ("compat/harness/static/api.py",
  "                if _is_type_checking(node.test):\n                    self._collect(node.orelse)",
  "                if False:\n                    pass", "test_static_api.py", "TYPE_CHECKING imports are not runtime"),
 ("compat/harness/static/api.py", "for match in _TOP_LEVEL_DEF.finditer(text):", "for match in []:",
  "test_static_api.py", "moved names located"),
 ("compat/harness/verdict.py", '"unsupported-on-cpu", "untested-at-runtime"})', '"unsupported-on-cpu"})',
  "test_static_layers.py", "static-only is gate 2"),
 ("compat/harness/static/layers.py", "'static' if runtime_ran else 'static only'", "'static'", "test_static_layers.py",
  "static only said so"),
 ("compat/harness/static/check.py", 'return Finding(use, "broken", f"overrides {method}',
  'return Finding(use, "ok", f"overrides {method}', "test_static_check.py", "override of a missing base method"),
 ("compat/harness/static/check.py", 'outcome = "guarded" if use.guarded else "broken"', 'outcome = "broken"',
  "test_static_check.py", "guarded import"),
 ("compat/harness/static/contract_history.py", "    elif Version(entry.introduced_in) != Version(first_broken):",
  "    elif False:", "test_static_bisect.py", "registry introduced_in checked"),
 ("compat/harness/static/contract_history.py", "    if sa is None or sb is None:", "    if False:",
  "test_static_bisect.py", "confirmed only by stored results"),
 ("compat/harness/static/contract_history.py", 'if finding is None or finding.outcome not in ("ok", "broken"):',
  "if finding is None:", "test_static_bisect.py", "unknown makes no flip"),
 ("compat/harness/static/layers.py",
  "    check_released(runtime + [Cell(c.vllm, c.speculators, \"gpu\") for c in static_only], index)", "    pass",
  "test_static_layers.py", "unknown versions still refused"),
 ("compat/harness/static/layers.py", 'if outcome == "broken" and status == "ok":', "if False:", "test_static_layers.py",
  "disagreement: static break runtime never hits"),
 ("compat/harness/runner.py", "    except Exception as exc:  # the static layer must never cost a runtime result",
  "    except ZeroDivisionError as exc:", "test_static_layers.py", "static failure never costs the runtime record"),
 ("compat/harness/static/fidelity.py", "differ = [p for p in both if tuple(cpu_py[p]) != tuple(official_py[p])]",
  "differ = []", "test_static_real_wheels.py", "fidelity compares CRCs"),
 ("compat/harness/static/uses.py", "            if owner in self.types:", "            if False:",
  "test_static_check.py", "methods on objects built from vLLM classes"),
 ("compat/harness/static/layers.py",
  'if not cell.vllm_wheel and dist != VLLM_DIST["gpu"] and not has(dist, cell.vllm) and has(VLLM_DIST["gpu"], '
  'cell.vllm):', "if False:", "test_static_layers.py",
  "a release the CPU build lacks gets a static verdict, not an error"),
 ("compat/harness/static/api.py",
  '                if found.kind == "external" and "pydantic" in (found.why or ""):\n                    return '
  '"ignored"', '                if False:\n                    pass', "test_static_api.py",
  "a pydantic dataclass ignores unknown keywords"),
 ("compat/harness/static/api.py",
  '                    if "forbid" in ast.unparse(found.node):\n                        return "refused"',
  '                    if False:\n                        pass', "test_static_api.py",
  "vLLM's @config followed to extra=forbid"),
 ("compat/harness/static/contract_history.py", "    if undecided:", "    if False:", "test_static_bisect.py",
  "an errored probe neither confirms nor contradicts a flip"),
 ("compat/harness/static/serve.py", "        if field not in fields:", "        if False:", "test_static_check.py",
  "serve flags checked against EngineArgs"),
 ("compat/harness/static/serve.py", "        if f'\"{value}\"' not in text and f\"'{value}'\" not in text:",
  "        if False:", "test_static_check.py", "config values checked where vLLM lists them"),
]
for path, old, new, tests, rule in M:
    p = R / path
    text = p.read_text()
    assert text.count(old) == 1, (path, old)
    p.write_text(text.replace(old, new))
    try:
        r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p",
                            "no:cacheprovider"] + [f"tests/unit/{t}" for t in tests.split()],
                           cwd=R, capture_output=True, text=True, timeout=300)
        last = r.stdout.strip().splitlines()[-1]
        print(f"{'CAUGHT' if r.returncode else 'SURVIVED'}: {rule} ({path}): {last}", flush=True)
    finally:
        p.write_text(text)
