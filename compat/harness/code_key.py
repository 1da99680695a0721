"""Inference keyed on the vLLM code a cell executed (issue 30): a release is inferred from a measured cell where
every function that cell ran (compat.harness.executed's sidecar) is the same code there.

Per executed function, the key holds the digest of:
- the function, normalised (compat.harness.static.fingerprint.normalised: no docstrings, comments, layout);
- every module-level statement that binds a name it reads (a constant, a table, a default, an import and its
  alias; inside top-level if / try blocks too), every class it reads by name (bases, keywords, decorators,
  fields, method names), and, for a method, the same of its own class;
- every definition of its qualified name (a property's getter and setter);
- nothing where the module or the function is absent: a key with a missing part never matches.

Two releases whose keys over the same executed set are equal ran the same Python on that path. What the key
does not see is listed in `BLIND`; the support table's random checks are what catch it.
"""

from __future__ import annotations

import ast
import hashlib
from typing import Any, Iterable, Iterator, Mapping

from compat.harness.static.fingerprint import StripDocstrings

BLIND = ("the compiled ops the functions call (torch.ops._C*: their schemas live in the build's .so files)",
         "code run by C++ or by Triton kernels", "functions reached only through exec/eval",
         "the other packages a release resolves (torch, transformers): compared apart, from the cells' records",
         "names read as attributes of another module (`envs.X`): that module's functions are keyed where they ran")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ModuleIndex:
    """One module's functions by qualified name, its module-level assignments by name, its classes' fields."""

    def __init__(self, source: str):
        self.tree = StripDocstrings().visit(ast.parse(source))
        self.functions: dict[str, list[ast.AST]] = {}  # every definition of a name (a property's getter and setter)
        self.owners: dict[str, str] = {}  # a method's qualified name -> its class's
        self.class_parts: dict[str, str] = {}
        self.bindings: dict[str, str] = {}  # module-level name -> every statement that binds it
        self._keys: dict[str, str | None] = {}
        for node in _module_statements(self.tree.body):
            for name in _bound(node):
                self.bindings[name] = self.bindings.get(name, "") + ast.dump(node, include_attributes=False)
        self._walk(self.tree, "", None)

    def _walk(self, node: ast.AST, prefix: str, owner: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                self.functions.setdefault(name, []).append(child)
                if owner is not None:
                    self.owners[name] = owner
                self._walk(child, f"{name}.<locals>.", None)
            elif isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}"
                self.class_parts[name] = _class_part(child)
                self._walk(child, f"{name}.", name)
            else:
                self._walk(child, prefix, owner)

    def key(self, qualname: str) -> str | None:
        if qualname not in self._keys:
            self._keys[qualname] = self._key(qualname)
        return self._keys[qualname]

    def _key(self, qualname: str) -> str | None:
        nodes = self.functions.get(qualname)
        if not nodes:
            return None
        owner = self.owners.get(qualname)
        read = sorted({n.id for node in nodes for n in ast.walk(node)
                       if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)})
        parts = [*(ast.dump(node, include_attributes=False) for node in nodes),
                 *(f"{name}={self.bindings[name]}" for name in read if name in self.bindings),
                 *(f"{name}:{self.class_parts[name]}" for name in read if name in self.class_parts),
                 f"class={self.class_parts.get(owner, '')}" if owner else ""]
        return _digest("\n".join(parts))


def _module_statements(body: list[ast.stmt]) -> Iterator[ast.stmt]:
    """The module's statements, those inside top-level if / try / with blocks too (a guarded import or flag)."""
    for node in body:
        yield node
        if isinstance(node, (ast.If, ast.Try, ast.With)) or type(node).__name__ == "TryStar":
            for block in ("body", "orelse", "finalbody"):
                yield from _module_statements(getattr(node, block, []) or [])
            for handler in getattr(node, "handlers", []) or []:
                yield from _module_statements(handler.body)


def _class_part(node: ast.ClassDef) -> str:
    """What a class is besides its methods' code: bases, keywords, decorators, its other statements (fields,
    defaults, constants) and the names of its methods (an override added or removed)."""
    others = [s for s in node.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
    methods = sorted(s.name for s in node.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)))
    return "".join(ast.dump(x, include_attributes=False)
                   for x in [*node.bases, *node.keywords, *node.decorator_list, *others]) + ",".join(methods)


def _bound(node: ast.stmt) -> list[str]:
    """The names a module-level statement binds: assignments (tuple targets too) and imports (their aliases)."""
    if isinstance(node, ast.Assign):
        return [n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        return [node.target.id]
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return [(alias.asname or alias.name).split(".")[0] for alias in node.names]
    return []


def executed_key(read_source: Any, functions: Mapping[str, Iterable[str]],
                 indexes: dict[str, ModuleIndex | None] | None = None) -> dict[str, str | None]:
    """{"path::qualname": digest or None} over the executed functions, each read through `read_source(path)`
    (a release's WheelSources.read; None or an exception: the module is absent there). `indexes`: the release's
    parsed modules by path, kept between calls over the same release."""
    indexes = {} if indexes is None else indexes
    out: dict[str, str | None] = {}
    for path, names in functions.items():
        if path not in indexes:
            try:
                source = read_source(path)
                indexes[path] = ModuleIndex(source) if source is not None else None
            except (KeyError, OSError, SyntaxError, ValueError):
                indexes[path] = None
        index = indexes[path]
        for name in names:
            out[f"{path}::{name}"] = index.key(name) if index is not None else None
    return out


def differences(measured: Mapping[str, str | None], candidate: Mapping[str, str | None]) -> list[str]:
    """The executed functions whose code differs (or is absent) in the candidate; empty: inferable."""
    return sorted(k for k, digest in measured.items() if digest is None or candidate.get(k) != digest)
