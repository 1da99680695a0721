"""Every path the documentation or compat's own comments and docstrings name exists in the repository.

Read: README.md, docs/*.md, bench/*.md, reports/*/README.md, and every comment and docstring under compat/.
A word is read as a path when it has a slash and starts at a folder of ours (`compat/harness/verdict.py`,
`tests/unit/`, `harness/verdict`, `../bench/RESULTS.md`) or when it ends in a file extension (`verdict.py`,
`findings.md` written alone); `compat.harness.verdict` (a module of ours, dotted) is read too. Each must resolve:
a path to a file or folder of the repository that it is the tail of (`.py` may be left off), a short name to a
file or folder of that name somewhere in the repository, a dotted name to a module of compat/ (and a name after
it to something that module's source names). Braces are expanded and a glob must match something.

What is not a path of ours is allowed only through the lists below, each saying why: paths inside an installed
package or wheel, files of those packages, of a model checkpoint or of the system named alone, what a run
writes (ignored by git), and the metavariables of our commands. URLs are never read.
"""

from __future__ import annotations

import ast
import fnmatch
import io
import itertools
import re
import subprocess
import tokenize
from pathlib import Path, PurePosixPath

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Paths inside an installed package or a wheel, named by its import name (`vllm/v1/core/sched/scheduler.py`,
# `speculators/data_generation/`): they live in the cell's venv, not here.
PACKAGE_TOPS = frozenset({"vllm", "speculators", "transformers", "torch", "hs_connectors", "triton", "site-packages",
                          "dist-packages", "safetensors", "pyzmq", "zmq"})
# Files of those packages, of a model checkpoint, of a wheel's metadata or of the system, named alone.
UPSTREAM_FILES = frozenset({
    # vLLM's modules
    "block_pool.py", "core.py", "cpu_model_runner.py", "deepseek_v2.py", "extract_hidden_states.py",
    "gpu_model_runner.py", "kv_cache_manager.py", "kv_cache_planning.py", "kv_cache_utils.py",
    "multiproc_executor.py", "rejection_sampler.py", "single_type_kv_cache_manager.py", "uniproc_executor.py",
    "worker_base.py", "abstract.py", "engine.py", "multiproc_worker_utils.py",  # the last two: V0's
    # speculators' modules, and scripts of its repository that are not in the wheel
    "vllm_hidden_states_generator.py", "custom_worker.py", "launch_vllm.py", "data_generation_offline.py",
    # a Hugging Face checkpoint's files (Kimi's custom-code tokenizer among them)
    "config.json", "model.safetensors.index.json", "tokenization_kimi.py",
    # a wheel's metadata
    "entry_points.txt",
})
# What our code writes when it runs, never committed (.gitignore), named by where it starts: the results, the
# reports (a rendered report named alone, and the published one: rebuilt from the records, never kept in git,
# compat.harness.evidence_pack), the cell venvs, the store, a cell's log, a built model's figures, the issue
# bot's comment.
RUN_OUTPUTS = ("results/", "reports/compat.", "reports/compat-screenshot", "reports/junit/", "compat.json",
               "compat.html", "compat.md", "published/compat.", ".venvs/", ".compat/", ".nox/", ".cache/",
               "results.sqlite", "job.log", "build.json", "comment.md",
               # a report's pages beside compat.html and its PR-comment form (compat.harness.report.render)
               "compat-cells/", "compat-comment.md", "reports/compat-", "published/compat-")
# Our commands' metavariables (`PATH.whl`, `DIR/<cell-id>.json`, `speculators-S.json`): a word that holds one is no
# path. The argument written after an option (`--baseline old/compat.json`, `--vllm ./vllm-0.25.0...whl`) is the
# user's, unless it starts at a folder of ours (`--results reports/cpu-support-0.8.1/results` must exist).
METAVARIABLES = frozenset({"PATH", "DIR", "FILE", "OLD", "NAME", "LOG", "CELL_ID", "ID", "V", "S"})
OPTION_ARGUMENT = re.compile(r"(?<![\w-])(--[a-z][\w-]*)[ =](?!-)\S+")
# Compiled libraries (`_C.abi3.so`) and wheels (`vllm-0.25.0...whl`) are a package's, its index's or the
# system's: this repository builds and commits none.
NOT_OURS = (".so", ".whl")
# Files whose every string is prose a reader sees, read like their docstrings: the registry's entries (titles,
# fixes, notes) are shown by the report and by `nox -s explain`.
PROSE_MODULES = ("compat/shared/breakages.py",)
# Modules another change is rewriting, and what each still names that does not resolve (results/bisect/ written
# as `bisect/`): tolerated until that change lands. An entry that no longer fails fails the test below: delete it.
BEING_REWRITTEN: dict[str, set[str]] = {}

EXTENSIONS = ("py", "md", "toml", "json", "yml", "yaml", "txt", "html", "sqlite", "png", "log", "cfg", "whl", "xml",
              "sh", "ini", "lock", "js", "css", "csv", "so", "pyi", "j2", "jinja")
URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s)>`\"']+")
_SEGMENT = r"(?:[\w.~$*+@-]|<[^<>\s]*>|\{[^{}\s]*\})+"
WORD = re.compile(rf"(?<![\w./<>{{}}$*~@+-])((?:\.\.?/)*{_SEGMENT}(?:/{_SEGMENT})*/?)")
HAS_EXTENSION = re.compile(r"\.(?:" + "|".join(EXTENSIONS) + r")$")
MODULE = re.compile(r"(?<![\w./-])compat(?:\.[A-Za-z_]\w*)+")


def repository() -> set[str]:
    """The repository's files and folders as git sees them (tracked, and new files git does not ignore)."""
    try:
        listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                                capture_output=True, text=True, check=True).stdout.split("\0")
    except (OSError, subprocess.CalledProcessError):  # no git: the tree itself, less caches
        listed = [str(p.relative_to(ROOT)) for p in ROOT.rglob("*") if p.is_file()
                  and not any(part.startswith(".") and part not in (".github", ".ci") or part == "__pycache__"
                              for part in p.relative_to(ROOT).parts)]
    files = {f for f in listed if f and (ROOT / f).exists()}
    return files | {str(parent) for f in files for parent in PurePosixPath(f).parents if str(parent) != "."}


REPO = repository()
NAMES = {PurePosixPath(p).name for p in REPO}
# A slashed word is read as a path of ours when it starts with a top-level name of the repository or a package
# of compat/ (`harness/verdict`, `cell/adapters/`): `pass/fail` or `vllm-project/vllm` are not.
OUR_FOLDERS = {PurePosixPath(p).parts[0] for p in REPO} | {PurePosixPath(p).name for p in REPO
                                                             if p.startswith("compat/") and (ROOT / p).is_dir()}


def _expand(word: str) -> list[str]:
    """`reports/compat.{json,html,md}` -> its three words."""
    match = re.search(r"\{([^{}]*)\}", word)
    if not match or "," not in match[1]:
        return [word]
    return [x for alt in match[1].split(",") for x in _expand(word[:match.start()] + alt + word[match.end():])]


def _exists(path: str, source: Path) -> bool:
    """A path of the repository, relative to the naming file's folder or the tail of a repository path."""
    path = path.rstrip("/")
    if path.startswith("../") or path.startswith("./"):
        resolved = (source.parent / path).resolve()
        return resolved.is_relative_to(ROOT) and str(resolved.relative_to(ROOT)) in REPO
    if "*" in path:
        return any(fnmatch.fnmatch(p, path) or fnmatch.fnmatch(p, "*/" + path) for p in REPO)
    tails = (path,) if PurePosixPath(path).suffix else (path, path + ".py")
    return any(p == tail or p.endswith("/" + tail) for p in REPO for tail in tails)


def _allowed(path: str) -> bool:
    parts = PurePosixPath(path.lstrip("./")).parts
    name = PurePosixPath(path).name
    return (path.startswith(RUN_OUTPUTS) or bool(parts) and parts[0] in PACKAGE_TOPS or name in UPSTREAM_FILES
            or name.endswith(NOT_OURS))


def _placeholder(segment: str) -> bool:
    return bool(re.search(r"[<>$~]", segment)) or any(token in METAVARIABLES for token in re.split(r"[-.]", segment))


def _ours(word: str) -> bool:
    """A word that starts at a folder of ours: `reports/x`, `compat/...`, `tests/...`."""
    return "/" in word and word.strip("`'\"").split("/")[0] in OUR_FOLDERS


def missing_paths(text: str, source: Path) -> list[str]:
    """The paths `text` names that are neither in the repository nor allowed by the lists above."""
    missing = []
    text = OPTION_ARGUMENT.sub(lambda m: m[0] if _ours(m[0].split(maxsplit=1)[-1].split("=")[-1]) else m[1],
                              URL.sub(" ", text))
    for word in WORD.findall(text):
        for path in _expand(word.rstrip(".,;:")):
            segments = [s for s in path.split("/") if s]
            named = [s for s in segments if s not in ("..", ".")]
            if not named or re.fullmatch(r"[\d.]+", named[0]):
                continue  # a version or a date: `0.11/0.12`
            if "/" in path.strip("/"):
                if not (path.startswith(("../", "./")) or named[0] in OUR_FOLDERS or named[0] in PACKAGE_TOPS
                        or HAS_EXTENSION.search(path)):
                    continue  # prose: `pass/fail`, `owner/repo`
            elif not HAS_EXTENSION.search(path) or path.startswith("."):
                continue  # a word, or an extension alone (`.py` members)
            fixed = list(itertools.takewhile(lambda s: not _placeholder(s), segments))
            if len(fixed) < len(segments):  # `results/<cell>.json`: the fixed folders before the placeholder
                if not fixed:
                    continue
                path = "/".join(fixed) + "/"
            if _allowed(path) or _exists(path, source):
                continue
            missing.append(path)
    for name in MODULE.findall(text):
        if HAS_EXTENSION.search(name) and name.count(".") == 1:
            continue  # `compat.json`: a file name, read above
        if not _module_exists(name):
            missing.append(name)
    return missing


def _module_exists(dotted: str) -> bool:
    """`compat.harness.verdict` (a module) or `compat.harness.verdict.gate` (a name its source holds)."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        source = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if source.is_file():
            text = source.read_text(encoding="utf-8")
            return all(re.search(rf"\b{re.escape(name)}\b", text) for name in parts[cut:])
    return False


def _doc_pages() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted((ROOT / "bench").glob("*.md")),
            *sorted((ROOT / "reports").glob("*/README.md"))]


def _code_files() -> list[Path]:
    return sorted(p for p in (ROOT / "compat").rglob("*.py") if "__pycache__" not in p.parts)


def comments_and_docstrings(source: str, every_string: bool = False) -> list[tuple[int, str]]:
    """(line number, text) of every comment and every module, class and function docstring (with
    `every_string`, of every string constant)."""
    found = [(tok.start[0], tok.string) for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    if every_string:
        return found + [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
                        if isinstance(node, ast.Constant) and isinstance(node.value, str)]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) \
                    and isinstance(first.value.value, str):
                found += [(first.lineno + i, line) for i, line in enumerate(first.value.value.splitlines())]
    return found


def _relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


@pytest.mark.parametrize("page", _doc_pages(), ids=_relative)
def test_every_path_a_page_names_exists(page):
    wrong = [f"line {number}: {path}" for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1)
             for path in missing_paths(line, page)]
    assert not wrong, f"{_relative(page)} names what the repository does not have:\n" + "\n".join(wrong)


@pytest.mark.parametrize("module", _code_files(), ids=_relative)
def test_every_path_a_comment_or_docstring_names_exists(module):
    every_string = _relative(module) in PROSE_MODULES
    tolerated = BEING_REWRITTEN.get(_relative(module), set())
    wrong = [f"line {number}: {path}"
             for number, text in comments_and_docstrings(module.read_text(encoding="utf-8"), every_string)
             for path in missing_paths(text, module) if path not in tolerated]
    assert not wrong, f"{_relative(module)} names what the repository does not have:\n" + "\n".join(wrong)


@pytest.mark.parametrize("module", sorted(BEING_REWRITTEN))
def test_each_tolerated_name_is_still_named(module):
    named = {path for _, text in comments_and_docstrings((ROOT / module).read_text(encoding="utf-8"))
             for path in missing_paths(text, ROOT / module)}
    fixed = sorted(BEING_REWRITTEN[module] - named)
    assert not fixed, f"{module} no longer names {fixed}: delete them from BEING_REWRITTEN"


@pytest.mark.parametrize("text, missing", [
    ("the rule is `compat/harness/verdict.py`", []),
    ("the rule is `compat/harness/verdicts.py`", ["compat/harness/verdicts.py"]),
    ("see verdict.py and breakages.py", []),
    ("see nosuchmodule.py", ["nosuchmodule.py"]),
    ("as harness/verdict says, and cell/observe.py", ["cell/observe.py"]),
    ("[findings](findings.md#x) and ../bench/RESULTS.md", []),
    ("../bench/NOSUCH.md", ["../bench/NOSUCH.md"]),
    ("compat.harness.verdict and compat.shared.breakages.REGISTRY", []),
    ("compat.harness.no_such_module", ["compat.harness.no_such_module"]),
    ("compat.shared.breakages.NO_SUCH_NAME", ["compat.shared.breakages.NO_SUCH_NAME"]),
    ("`reports/compat.{json,html,md}` and `reports/junit/`", []),  # what a run writes
    ("`docs/{findings,nosuch}.md`", ["docs/nosuch.md"]),
    ("`reports/cpu-support-*/results` and `reports/nosuch-*/x`", ["reports/nosuch-*/x"]),
    ("`results/<cell>.json`, `.venvs/`, `PATH.whl`, `OLD/compat.json`, `.py` members", []),
    ("`nox -s report -- --history --baseline old/compat.json --vllm ./v.whl`, but old/compat.json",
     ["old/compat.json"]),
    ("`--results reports/nosuch/results --results=docs/nosuch.md`", ["reports/nosuch/results", "docs/nosuch.md"]),
    ("`results/support/speculators-S.json`, `docs/speculators-S--ID.json`", []),
    ("vllm/_C.abi3.so, _vllm_fa3_C.abi3.so, libiomp5.so and vllm-0.9.2+cpu-cp38-abi3-....whl", []),
    ("`vllm/v1/core/sched/scheduler.py`, kv_cache_utils.py, https://github.com/a/b/blob/main/c.py", []),
    ("pass/fail, vllm-project/vllm, 2026-12-01/02, tokens/s", []),
    ("`tests/nosuch/`", ["tests/nosuch/"]),
])
def test_the_reader_finds_what_is_missing_and_allows_the_lists(text, missing):
    assert missing_paths(text, ROOT / "docs" / "page.md") == missing


def test_the_reader_reads_comments_and_docstrings():
    source = '"""Module, see a.py."""\nx = 1  # see b.py\ndef f():\n    """See c.py."""\ns = "not d.py"\n'
    assert comments_and_docstrings(source) == [(2, "# see b.py"), (1, "Module, see a.py."), (4, "See c.py.")]
