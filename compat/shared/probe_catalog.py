"""The probes a cell runs, read from the probes' own markers: adding a probe is writing it.

A probe is a test function in compat/cell/probes/in_process/ or compat/cell/probes/server/ marked
`@pytest.mark.probe("id")`. Every fact the harness holds about a probe is an option of that marker:
- `data=True`: its `ok` must carry figures the report recomputes (compat.harness.evidence);
- `advisory=True`: it never decides a verdict;
- `composite=True`: it runs the whole generator or reads what one `vllm serve` run wrote, so any
  exception-raising breakage of that run can be the failure it sees (compat.harness.classify);
- `variant="name"`: the server-era variant (compat.shared.axes.SERVER_VARIANTS) its one key decides,
  or `variant={"case": "name", ...}` per case (compat.shared.manifest, the report's server-era view);
- `contract=("call", "dotted.name")` or `("config-key", "key=value")`: the static contract it observes
  at runtime (compat.harness.static.layers compares the two layers on it);
- `since=N`: the probe set it joined (PROBE_SET, one more than the newest probe's before it; left out: the
  set every record before 2026-12-03 was written with, 0). A record says which set its runner had
  (`manifest.probe_set`) and is judged by that set's keys, so a new probe asks nothing of older records.
Its keys are the ones
compat.cell.pytest_plugin reports: `id`, or `id[case]` with case the parametrized values joined by
`-`, then `tpN` from `@pytest.mark.tp(N)`. The `with_compat` twin of a probe reports into the same
key, so only the raw test counts.

Read with `ast`, not by importing the modules: the harness that decides verdicts has no vLLM.
A marker or a parametrize this reader cannot resolve raises CatalogError naming the file and line,
so a probe is never silently left out of the manifest.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

from compat.shared.axes import SERVER_VARIANTS

PACKAGE_ROOT = Path(__file__).resolve().parents[1]  # compat/
PROBE_DIRS = ("cell/probes/in_process", "cell/probes/server")
FLAGS = ("data", "advisory", "composite")  # the marker options that are True or left out
MARKER_OPTIONS = (*FLAGS, "variant", "contract", "since")
CONTRACT_KINDS = ("call", "config-key")


class CatalogError(ValueError):
    """A probe module whose markers cannot be read statically."""


@dataclass(frozen=True)
class Probe:
    id: str
    cases: tuple[Optional[str], ...]  # (None,) for an unparametrized probe
    data: bool
    advisory: bool
    where: str  # module path and line, relative to compat/
    suite: str = ""  # the directory it lives in: in_process or server
    composite: bool = False
    variants: tuple[tuple[str, str], ...] = ()  # (key, the server-era variant that key decides)
    contract: Optional[tuple[str, str]] = None  # (kind, target) of the static contract it observes
    since: int = 0  # the probe set it joined (`since=N` on its marker)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(f"{self.id}[{case}]" if case else self.id for case in self.cases)


def _where(path: Path, node: ast.AST) -> str:
    shown = path.relative_to(PACKAGE_ROOT.parent) if path.is_relative_to(PACKAGE_ROOT.parent) else path
    return f"{shown}:{getattr(node, 'lineno', '?')}"


def _mark(decorator: ast.expr) -> Optional[tuple[str, ast.Call]]:
    """`pytest.mark.NAME(...)` → (NAME, the call)."""
    if (isinstance(decorator, ast.Call) and isinstance(decorator.func, ast.Attribute)
            and isinstance(decorator.func.value, ast.Attribute) and decorator.func.value.attr == "mark"):
        return decorator.func.attr, decorator
    return None


def _module_of(name: str) -> Path:
    parts = name.split(".")
    if parts[0] != "compat":
        raise KeyError(name)
    path = PACKAGE_ROOT.joinpath(*parts[1:])
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


@functools.lru_cache(maxsize=None)
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))


def _constant(path: Path, name: str, seen: frozenset[tuple[Path, str]] = frozenset()) -> Any:
    """A module-level literal NAME of this module, following `from compat.<module> import NAME`."""
    if (path, name) in seen:
        raise KeyError(name)
    for node in _tree(path).body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
                return ast.literal_eval(node.value)
        if isinstance(node, ast.ImportFrom) and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _constant(_module_of(node.module), alias.name, seen | {(path, name)})
    raise KeyError(name)


def _values(path: Path, node: ast.expr, where: str) -> list[Any]:
    try:
        if isinstance(node, ast.Name):
            values = _constant(path, node.id)
        else:
            values = ast.literal_eval(node)
    except (KeyError, ValueError, SyntaxError, FileNotFoundError) as exc:
        raise CatalogError(f"{where}: parametrize values {ast.unparse(node)!r} are not a literal list or a "
                           f"module-level literal (here or imported from compat.*): {exc!r}") from None
    if not isinstance(values, (list, tuple)):
        raise CatalogError(f"{where}: parametrize values {ast.unparse(node)!r} are {type(values).__name__}, "
                           f"expected a list or tuple")
    return list(values)


def _probe(path: Path, function: ast.FunctionDef) -> Optional[Probe]:
    marks = [m for m in map(_mark, function.decorator_list) if m]
    probe = next((call for name, call in marks if name == "probe"), None)
    where = _where(path, function)
    if probe is None:
        if function.name.startswith("test"):
            raise CatalogError(f"{where}: {function.name} is a test in a probe module without "
                               f"@pytest.mark.probe(\"id\"); the cell would report it under its name")
        return None
    if any(name == "compat_mode" for name, _ in marks):
        return None  # the with_compat twin: same keys as its raw test
    if len(probe.args) != 1 or not isinstance(probe.args[0], ast.Constant) or not isinstance(probe.args[0].value, str):
        raise CatalogError(f"{where}: @pytest.mark.probe takes one string id, "
                           "e.g. @pytest.mark.probe(\"block_hasher\")")
    options: dict[str, Any] = {}
    for keyword in probe.keywords:
        options[str(keyword.arg)] = _option(path, keyword, where)
    params: list[list[str]] = []
    tp: list[str] = []
    for name, call in marks:
        if name == "parametrize":
            if len(call.args) < 2 or not isinstance(call.args[0], ast.Constant) or "," in str(call.args[0].value):
                raise CatalogError(f"{where}: only @pytest.mark.parametrize(\"name\", VALUES) with one name is read")
            params.append([str(v) for v in _values(path, call.args[1], where)])
        elif name == "tp":
            tp = [f"tp{ast.literal_eval(call.args[0])}"]
    # as compat.cell.pytest_plugin names a case: the parameters pytest applied first (the decorator
    # nearest the function) first, then tpN
    cases: list[Optional[str]] = [None]
    for axis in [*reversed(params), *([tp] if tp else [])]:
        cases = ["-".join(filter(None, [case, value])) for case in cases for value in axis]
    probe_id = probe.args[0].value
    return Probe(probe_id, tuple(cases), options.get("data", False), options.get("advisory", False), where,
                 suite=path.parent.name, composite=options.get("composite", False),
                 variants=_variants(probe_id, cases, options.get("variant"), where), contract=options.get("contract"),
                 since=options.get("since", 0))


def _option(path: Path, keyword: ast.keyword, where: str) -> Any:
    """One option of @pytest.mark.probe (a literal, or a module-level literal's name), checked for its shape."""
    accepted = (f"accepted {', '.join(o + '=True' for o in FLAGS)}, variant=\"name\" or {{\"case\": \"name\"}}, "
                f"contract=(kind, target) with kind one of {', '.join(CONTRACT_KINDS)}, since=N (N >= 1)")
    try:
        value = _constant(path, keyword.value.id) if isinstance(keyword.value, ast.Name) \
            else ast.literal_eval(keyword.value)
    except (KeyError, ValueError, TypeError, SyntaxError, FileNotFoundError):
        value = None
    if keyword.arg in FLAGS:
        ok = isinstance(value, bool)
    elif keyword.arg == "variant":
        ok = isinstance(value, str) or (isinstance(value, dict) and bool(value)
                                        and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()))
    elif keyword.arg == "contract":
        ok = isinstance(value, tuple) and len(value) == 2 and value[0] in CONTRACT_KINDS and isinstance(value[1], str)
    elif keyword.arg == "since":
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
    else:
        ok = False
    if not ok:
        raise CatalogError(f"{where}: @pytest.mark.probe option {ast.unparse(keyword)!r}: {accepted}")
    return value


def _variants(probe_id: str, cases: list[Optional[str]], variant: Union[str, dict[str, str], None],
              where: str) -> tuple[tuple[str, str], ...]:
    """(key, variant) for each key a server-era variant decides."""
    if variant is None:
        return ()
    if isinstance(variant, str):
        if cases != [None]:
            raise CatalogError(f"{where}: variant={variant!r} on a parametrized probe: name the variant per case, "
                               f"variant={{\"case\": \"name\"}}")
        pairs = [(probe_id, variant)]
    else:
        unknown = sorted(set(variant) - {c for c in cases if c})
        if unknown:
            raise CatalogError(f"{where}: variant names cases {unknown} this probe does not have "
                               f"(its cases: {', '.join(c for c in cases if c)})")
        pairs = [(f"{probe_id}[{case}]", name) for case, name in variant.items()]
    strangers = [name for _, name in pairs if name not in SERVER_VARIANTS]
    if strangers:
        raise CatalogError(f"{where}: variant {strangers[0]!r} is not a server-era variant "
                           f"(compat.shared.axes.SERVER_VARIANTS: {', '.join(SERVER_VARIANTS)})")
    return tuple(pairs)


def read_module(path: Path) -> list[Probe]:
    """The probes one module declares, in file order (the with_compat twins left out)."""
    found = []
    for node in _tree(path).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            probe = _probe(path, node)  # type: ignore[arg-type]
            if probe:
                found.append(probe)
    return found


@functools.lru_cache(maxsize=None)
def probes() -> tuple[Probe, ...]:
    """Every probe of the in-process and server suites, in file order, one entry per test function."""
    found = [probe for directory in PROBE_DIRS
             for path in sorted((PACKAGE_ROOT / directory).glob("test_*.py")) for probe in read_module(path)]
    if not found:
        raise CatalogError(f"no probe found under {', '.join(str(PACKAGE_ROOT / d) for d in PROBE_DIRS)}")
    return tuple(found)


def probe_keys(probe_set: Optional[int] = None) -> tuple[str, ...]:
    """Every key a cell reports (both suites run in one session; the other era's probes say n/a); with
    `probe_set`, the keys a runner of that probe set reported (the probes that joined at or before it)."""
    return tuple(dict.fromkeys(key for probe in probes() if probe_set is None or probe.since <= probe_set
                               for key in probe.keys))


def probe_set() -> int:
    """This harness's probe set: the newest probe's `since` (0 before any probe joined with one)."""
    _agreed("since")
    return max((probe.since for probe in probes()), default=0)


def _agreed(option: str) -> dict[str, Probe]:
    """The probes whose marker sets `option`, one per id (the first test), once every test of each agrees."""
    if option not in MARKER_OPTIONS:
        raise ValueError(f"{option!r}: accepted {', '.join(MARKER_OPTIONS)}")
    attribute = "variants" if option == "variant" else option
    first: dict[str, Probe] = {}
    for probe in probes():
        seen = first.setdefault(probe.id, probe)
        mine, theirs = getattr(probe, attribute), getattr(seen, attribute)
        if option == "variant":  # per key: a test of other cases names other keys
            mine, theirs = bool(mine), bool(theirs)
        if mine != theirs:
            marked, unmarked = (probe, seen) if mine else (seen, probe)
            raise CatalogError(f"probe {probe.id!r} is marked {option}={getattr(marked, attribute)!r} at "
                               f"{marked.where} and {getattr(unmarked, attribute)!r} at {unmarked.where}: "
                               f"mark every test of a probe alike")
    return {pid: probe for pid, probe in first.items() if getattr(probe, attribute)}


def ids_where(option: str) -> frozenset[str]:
    """The probe ids whose marker sets `option` (data, advisory, composite, variant, contract); a probe's
    marks must agree across its tests."""
    return frozenset(_agreed(option))


def variant_keys() -> dict[str, str]:
    """Probe key -> the server-era variant it decides, in file order (the markers' `variant`); a variant may
    decide several keys (the VLM's text and image probes), a key one variant."""
    _agreed("variant")
    found: dict[str, str] = {}
    for probe in probes():
        for key, name in probe.variants:
            if found.setdefault(key, name) != name:
                raise CatalogError(f"probe key {key!r} is decided by both variants {found[key]!r} and {name!r} "
                                   f"({probe.where}): one variant per key")
    return found


def contracts() -> dict[str, tuple[str, str]]:
    """Probe id -> (kind, target) of the static contract it observes, in file order (the markers' `contract`)."""
    return {pid: probe.contract for pid, probe in _agreed("contract").items() if probe.contract}
