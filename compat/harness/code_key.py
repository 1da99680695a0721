"""Inference keyed on the vLLM code a cell executed (issue 30): a release is inferred from a measured cell where
every function that cell ran (compat.harness.executed's sidecar) is the same code there.

Per executed function, the key holds the digest of:
- the function, normalised (compat.harness.static.fingerprint.normalised: no docstrings, comments, layout);
- every module-level assignment it reads by name (a constant, a table, a default), and, for a method, the
  statements of its class body that are not functions (fields, defaults, class constants);
- nothing where the module or the function is absent: a key with a missing part never matches.

Two releases whose keys over the same executed set are equal ran the same Python on that path. What the key
does not see is listed in `BLIND`; the support table's random checks are what catch it.
"""

from __future__ import annotations

import ast
import hashlib
from typing import Any, Iterable, Mapping

from compat.harness.static.fingerprint import _StripDocstrings

BLIND = ("the compiled ops the functions call (torch.ops._C*: their schemas live in the build's .so files)",
         "code run by C++ or by Triton kernels", "functions reached only through exec/eval")


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class ModuleIndex:
    """One module's functions by qualified name, its module-level assignments by name, its classes' fields."""

    def __init__(self, source: str):
        self.tree = _StripDocstrings().visit(ast.parse(source))
        self.functions: dict[str, ast.AST] = {}
        self.owners: dict[str, str] = {}  # a method's qualified name -> its class's
        self.class_fields: dict[str, str] = {}
        self.assignments: dict[str, str] = {}
        for node in self.tree.body:
            for name in _assigned(node):
                self.assignments[name] = self.assignments.get(name, "") + ast.dump(node, include_attributes=False)
        self._walk(self.tree, "", None)

    def _walk(self, node: ast.AST, prefix: str, owner: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = f"{prefix}{child.name}"
                self.functions[name] = child
                if owner is not None:
                    self.owners[name] = owner
                self._walk(child, f"{name}.<locals>.", None)
            elif isinstance(child, ast.ClassDef):
                name = f"{prefix}{child.name}"
                fields = [s for s in child.body if not isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                                       ast.ClassDef))]
                self.class_fields[name] = "".join(ast.dump(s, include_attributes=False) for s in fields) + \
                    "".join(ast.dump(b, include_attributes=False) for b in child.bases)
                self._walk(child, f"{name}.", name)
            else:
                self._walk(child, prefix, owner)

    def key(self, qualname: str) -> str | None:
        node = self.functions.get(qualname)
        if node is None:
            return None
        owner_name = self.owners.get(qualname)
        read = sorted({n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)})
        parts = [ast.dump(node, include_attributes=False),
                 *(f"{name}={self.assignments[name]}" for name in read if name in self.assignments),
                 f"class={self.class_fields.get(owner_name, '')}" if owner_name else ""]
        return _digest("\n".join(parts))


def _assigned(node: ast.stmt) -> list[str]:
    if isinstance(node, ast.Assign):
        return [t.id for t in node.targets if isinstance(t, ast.Name)]
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
        return [node.target.id]
    return []


def executed_key(read_source: Any, functions: Mapping[str, Iterable[str]]) -> dict[str, str | None]:
    """{"path::qualname": digest or None} over the executed functions, each read through `read_source(path)`
    (a release's WheelSources.read; None or an exception: the module is absent there)."""
    out: dict[str, str | None] = {}
    for path, names in functions.items():
        try:
            source = read_source(path)
            index = ModuleIndex(source) if source is not None else None
        except (KeyError, OSError, SyntaxError, ValueError):
            index = None
        for name in names:
            out[f"{path}::{name}"] = index.key(name) if index is not None else None
    return out


def differences(measured: Mapping[str, str | None], candidate: Mapping[str, str | None]) -> list[str]:
    """The executed functions whose code differs (or is absent) in the candidate; empty: inferable."""
    return sorted(k for k, digest in measured.items() if digest is None or candidate.get(k) != digest)
