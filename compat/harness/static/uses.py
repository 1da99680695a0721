"""What a speculators (or hs-connectors) release uses of vLLM, read from its wheel with `ast`.

Every `Use` is one contract with vLLM, at one place of the release's code:
- `import`: a vLLM module or name it imports (anywhere in the file: lazy imports count; imports
  under `if TYPE_CHECKING:` do not run and are left out; one inside `try: ... except ImportError`
  is `guarded`);
- `call`: a call of a vLLM name it imported (a function, or a class being constructed), with how
  many positional arguments and which keywords it passes;
- `method`: a method called on an object it built from a vLLM class (`x = MultiprocExecutor(...)`,
  then `x.collective_rpc(...)`; also `self.x`), or on `self`/`super()` inside its subclass of a
  vLLM class, private methods included;
- `subclass`: a vLLM class it subclasses; `override`: each method its subclass defines (whether
  that overrides anything is the checker's question, release by release).
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from compat.harness.static.api import Signature, _dotted, _is_type_checking, function_signature
from compat.harness.static.sources import WheelSources

VLLM = "vllm"


@dataclass(frozen=True)
class Use:
    kind: str  # import, call, method, subclass, override
    target: str  # the dotted vLLM name
    file: str  # in the release, e.g. speculators/data_generation/vllm_hidden_states_generator.py
    line: int
    npos: int = 0
    keywords: tuple[str, ...] = ()
    star: bool = False  # *args in the call
    starstar: bool = False  # **kwargs in the call
    guarded: bool = False  # an import inside try/except ImportError
    signature: Signature | None = None  # an override's own signature
    other_bases: tuple[str, ...] = ()  # an override: the subclass's other vLLM bases, looked up after `target`'s
    dist: str = ""

    @property
    def site(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def short(self) -> str:
        parts = self.target.split(".")
        cut = next((i for i, p in enumerate(parts) if p[:1].isupper()), len(parts) - 1)
        return ".".join(parts[cut:])

    def call_text(self) -> str:
        args = ["…"] * self.npos + [f"{k}=…" for k in self.keywords]
        args += ["*…"] if self.star else []
        args += ["**…"] if self.starstar else []
        return f"{self.short}({', '.join(args)})"

    @property
    def id(self) -> str:
        """Stable within a release: what is used and how (the call site names it in findings)."""
        if self.kind in ("call", "method"):
            return f"{self.kind}:{self.call_text()}@{self.target}"
        return f"{self.kind}:{self.target}"


def _guarded_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Try) and any(
                h.type is None or "ImportError" in ast.unparse(h.type) or "Exception" in ast.unparse(h.type)
                for h in node.handlers):
            for stmt in node.body:
                for inner in ast.walk(stmt):
                    if isinstance(inner, (ast.Import, ast.ImportFrom)):
                        lines.add(inner.lineno)
    return lines


def _type_checking_lines(tree: ast.AST) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for stmt in node.body:
                for inner in ast.walk(stmt):
                    if hasattr(inner, "lineno"):
                        lines.add(inner.lineno)
    return lines


class _FileUses:
    def __init__(self, path: str, text: str, dist: str):
        self.path, self.dist = path, dist
        self.tree = ast.parse(text, filename=path)
        self.uses: list[Use] = []
        self.alias: dict[str, str] = {}  # local name -> dotted vLLM name
        self.types: dict[str, str] = {}  # "x" / "self.x" -> vLLM class it was built from

    def run(self) -> list[Use]:
        guarded, type_only = _guarded_lines(self.tree), _type_checking_lines(self.tree)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ImportFrom) and not node.level and (node.module or "").split(".")[0] == VLLM:
                if node.lineno in type_only:
                    continue
                for a in node.names:
                    target = f"{node.module}.{a.name}"
                    self.alias[a.asname or a.name] = target
                    self._add("import", target, node, guarded=node.lineno in guarded)
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name.split(".")[0] == VLLM and node.lineno not in type_only:
                        self.alias[a.asname or a.name.split(".")[0]] = a.name if a.asname else VLLM
                        self._add("import", a.name, node, guarded=node.lineno in guarded)
        for node in ast.walk(self.tree):  # what objects built from vLLM classes are called
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                built = self.resolve(_dotted(node.value.func))
                if built and built.split(".")[-1][:1].isupper():
                    for assigned in node.targets:
                        name = _dotted(assigned)
                        if name:
                            self.types[name] = built
        for node in ast.walk(self.tree):
            if isinstance(node, ast.ClassDef):
                self._class(node)
        self._calls(self.tree, None, set())
        return self.uses

    def resolve(self, dotted: str) -> str | None:
        if not dotted:
            return None
        head, _, rest = dotted.partition(".")
        if head in self.alias:
            return f"{self.alias[head]}.{rest}" if rest else self.alias[head]
        return None

    def _add(self, kind: str, target: str, node: ast.stmt | ast.expr, **extra: Any) -> None:
        self.uses.append(Use(kind, target, self.path, node.lineno, dist=self.dist, **extra))

    def _class(self, node: ast.ClassDef) -> None:
        bases = [t for t in (self.resolve(_dotted(b)) for b in node.bases) if t]
        for target in bases:
            self._add("subclass", target, node)
        if not bases:
            return
        for stmt in node.body:
            if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)) and not (
                    stmt.name.startswith("__") and stmt.name != "__init__"):
                static = any(_dotted(d) == "staticmethod" for d in stmt.decorator_list)
                self._add("override", f"{bases[0]}.{stmt.name}", stmt, other_bases=tuple(bases[1:]),
                          signature=function_signature(stmt, self.path, drop_self=not static))

    def _calls(self, node: ast.AST, vllm_base: tuple[str, set[str]] | None, _seen: set[str]) -> None:
        for child in ast.iter_child_nodes(node):
            base = vllm_base
            if isinstance(child, ast.ClassDef):
                bases = [t for t in (self.resolve(_dotted(b)) for b in child.bases) if t]
                own = {s.name for s in child.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))}
                base = (bases[0], own) if bases else None
            if isinstance(child, ast.Call):
                self._call(child, base)
            self._calls(child, base, _seen)

    def _call(self, call: ast.Call, vllm_base: tuple[str, set[str]] | None) -> None:
        func = call.func
        dotted = _dotted(func) if isinstance(func, (ast.Name, ast.Attribute)) else ""
        shape = dict(npos=sum(not isinstance(a, ast.Starred) for a in call.args),
                     keywords=tuple(k.arg for k in call.keywords if k.arg),
                     star=any(isinstance(a, ast.Starred) for a in call.args),
                     starstar=any(k.arg is None for k in call.keywords))
        target = self.resolve(dotted)
        if target:  # a function or class it imported, or Class.method(...)
            owner = target.split(".")[-2] if "." in target else ""
            self._add("method" if owner[:1].isupper() else "call", target, call, **shape)
            return
        if isinstance(func, ast.Attribute):
            owner = _dotted(func.value)
            if owner in self.types:
                self._add("method", f"{self.types[owner]}.{func.attr}", call, **shape)
            elif vllm_base and owner == "self" and func.attr not in vllm_base[1]:
                self._add("method", f"{vllm_base[0]}.{func.attr}", call, **shape)
            elif vllm_base and isinstance(func.value, ast.Call) and _dotted(func.value.func) == "super":
                self._add("method", f"{vllm_base[0]}.{func.attr}", call, **shape)


def uses_of(sources: WheelSources, packages: tuple[str, ...]) -> list[Use]:
    """Every use of vLLM in the release's packages (e.g. ("speculators",)), in file order."""
    found: list[Use] = []
    for path, text in sorted(sources.read_all().items()):
        if path.split("/")[0] not in packages or VLLM not in text:
            continue
        try:
            found += _FileUses(path, text, sources.dist).run()
        except SyntaxError:
            continue
    return sorted(found, key=lambda u: (u.file, u.line, u.kind, u.target))
