"""One vLLM release's public and private API, resolved from its sources with `ast`.

`Api(sources).lookup("vllm.v1.request.Request")` follows re-exports (`from .x import Y`, a lazy
`__getattr__` table of "module:attr" strings) to the definition and answers what it is (module,
class, function, variable, or something defined outside vLLM), where (file:line), and for a
callable its `Signature`: a class's own or inherited `__init__`, else the fields of a dataclass
(`@dataclass`, vLLM's `@config`, pydantic) with their defaults and `InitVar`s. Class members are
looked up along the class's bases inside vLLM; a base from outside vLLM (torch, ABC, ...) makes a
member that is not found `unknown` rather than missing. `where_defined(name)` finds where a name
that is not at its old place is defined now.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, cast

from compat.harness.static.sources import WheelSources

DATACLASS_DECORATORS = {"dataclass", "config", "pydantic_dataclass", "dataclasses.dataclass", "dataclass_transform"}
FIELD_CALLS = {"field", "Field", "dataclasses.field", "pydantic.Field", "msgspec.field"}
MODEL_BASES = {"BaseModel", "pydantic.BaseModel", "msgspec.Struct", "Struct", "NamedTuple", "typing.NamedTuple"}
OPAQUE_BASES = {"object", "ABC", "abc.ABC", "Generic", "Protocol", "typing.Generic", "typing.Protocol"}


@dataclass(frozen=True)
class Param:
    name: str
    kind: str  # "posonly", "pos", "kwonly", "varargs", "varkw"
    required: bool


@dataclass(frozen=True)
class Signature:
    params: tuple[Param, ...]
    origin: str  # "def", "dataclass fields", "pydantic model fields"
    file: str = ""
    line: int = 0
    # an unknown keyword: "refused" (TypeError / pydantic extra="forbid") or "ignored" (a pydantic
    # dataclass or model without extra="forbid" drops it silently)
    extra: str = "refused"

    def ignored(self, keywords: tuple[str, ...]) -> list[str]:
        """The keywords this signature takes no parameter for but silently ignores."""
        names = {p.name for p in self.params if p.kind in ("pos", "kwonly")}
        return [k for k in keywords if k not in names] if self.extra == "ignored" else []

    def text(self) -> str:
        out = []
        for p in self.params:
            prefix = {"varargs": "*", "varkw": "**"}.get(p.kind, "")
            out.append(f"{prefix}{p.name}{'' if p.required or prefix else '=…'}")
        return f"({', '.join(out)})"

    def bind(self, npos: int, keywords: tuple[str, ...], star: bool = False, starstar: bool = False) -> list[str]:
        """Why a call with `npos` positional arguments and these keywords would not bind (Python's rules)."""
        problems = []
        positional = [p for p in self.params if p.kind in ("posonly", "pos")]
        names = {p.name: p for p in self.params if p.kind in ("pos", "kwonly")}
        varargs = any(p.kind == "varargs" for p in self.params)
        varkw = any(p.kind == "varkw" for p in self.params)
        if npos > len(positional) and not varargs:
            problems.append(f"takes {len(positional)} positional argument(s), {npos} given")
        filled = {p.name for p in positional[:npos]}
        for kw in keywords:
            if kw in filled:
                problems.append(f"got multiple values for argument {kw!r}")
            elif kw not in names and not varkw and self.extra != "ignored":
                problems.append(f"unexpected keyword argument {kw!r}")
        if not starstar:
            missing = [p.name for p in self.params if p.required and p.kind in ("posonly", "pos", "kwonly")
                       and p.name not in filled and p.name not in keywords
                       and not (star and p.kind != "kwonly")]
            if missing:
                problems.append(f"missing required argument(s) {', '.join(map(repr, missing))}")
        return problems


@dataclass(frozen=True)
class Found:
    """What a dotted name resolves to in the release."""

    name: str
    kind: str  # "module", "class", "function", "variable", "external", "unknown", "missing"
    file: str = ""
    line: int = 0
    # the ast node of a def: a ClassDef for a class, a FunctionDef / AsyncFunctionDef for a function
    node: Any = field(default=None, compare=False, repr=False)
    module: str = ""  # the module it is defined in
    why: str = ""  # for "missing" / "unknown" / "external"
    in_class: bool = False  # a member of a class (a method takes self unless static)

    @property
    def exists(self) -> bool:
        return self.kind not in ("missing",)

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}" if self.file and self.line else self.file


def _dotted(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return f"{inner}.{node.attr}" if inner else ""
    if isinstance(node, ast.Call):
        return _dotted(node.func)
    if isinstance(node, ast.Subscript):
        return _dotted(node.value)
    return ""


def _is_type_checking(test: ast.AST) -> bool:
    return _dotted(test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")


class Module:
    """The top-level bindings of one module: name -> ("def", node) | ("import", module, attr) | ("module", module)."""

    def __init__(self, name: str, path: str, text: str):
        self.name, self.path = name, path
        self.tree = ast.parse(text, filename=path)
        self.is_package = path.endswith("__init__.py")
        self.bindings: dict[str, tuple[Any, ...]] = {}
        self.star: list[str] = []
        self.lazy: dict[str, str] = {}
        self.has_getattr = False
        self._collect(self.tree.body)

    def _absolute(self, module: str | None, level: int) -> str:
        if not level:
            return module or ""
        parts = self.name.split(".")
        if not self.is_package:
            parts = parts[:-1]
        parts = parts[: len(parts) - (level - 1)] if level > 1 else parts
        return ".".join(parts + ([module] if module else []))

    def _collect(self, body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                self.bindings[node.name] = ("def", node)
                if node.name == "__getattr__":
                    self.has_getattr = True
            elif isinstance(node, ast.ImportFrom):
                base = self._absolute(node.module, node.level)
                for alias in node.names:
                    if alias.name == "*":
                        self.star.append(base)
                    else:
                        self.bindings[alias.asname or alias.name] = ("import", base, alias.name, node.lineno)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname:
                        self.bindings[alias.asname] = ("module", alias.name, node.lineno)
                    else:
                        top = alias.name.split(".")[0]
                        self.bindings.setdefault(top, ("module", top, node.lineno))
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for target in targets:
                    for name in ast.walk(target):
                        if isinstance(name, ast.Name):
                            self.bindings[name.id] = ("def", node)
                value = getattr(node, "value", None)
                if isinstance(value, ast.Dict):
                    for key, val in zip(value.keys, value.values):
                        if isinstance(key, ast.Constant) and isinstance(val, ast.Constant) \
                                and isinstance(key.value, str) and isinstance(val.value, str) and ":" in val.value:
                            self.lazy[key.value] = val.value
            elif isinstance(node, ast.If):
                if _is_type_checking(node.test):
                    self._collect(node.orelse)
                else:
                    self._collect(node.body)
                    self._collect(node.orelse)
            elif isinstance(node, ast.Try) or type(node).__name__ == "TryStar":
                tried = cast(ast.Try, node)  # a TryStar (3.11's except*) has a Try's fields
                self._collect(tried.body)
                for handler in tried.handlers:
                    self._collect(handler.body)
                self._collect(tried.orelse)
                self._collect(tried.finalbody)
            elif isinstance(node, ast.With):
                self._collect(node.body)


_PARSED: dict[tuple[str, tuple[Any, ...]], Module | None] = {}
_SELF_ATTRS: dict[int, set[str]] = {}  # class node (kept alive by _PARSED) -> attributes its methods assign on self


def parsed(name: str, path: str, sources: WheelSources) -> Module | None:
    """The module parsed once for every release whose wheel holds the same file (same CRC-32 and
    size in the zip directory): most modules do not change from one release to the next."""
    key = (path, tuple(sources.crcs.get(path) or (sources.filename,)))
    if key not in _PARSED:
        try:
            _PARSED[key] = Module(name, path, sources.read(path))
        except SyntaxError:
            _PARSED[key] = None
    return _PARSED[key]


class Api:
    def __init__(self, sources: WheelSources, package: str = "vllm"):
        self.sources, self.package = sources, package
        self.version = sources.version
        self._modules: dict[str, Module | None] = {}
        # This release's own caches: a class-level lru_cache would keep every Api built (and its
        # wheel's sources) alive for the process, and bisect builds one per vLLM release.
        self.name_in = lru_cache(maxsize=None)(self._name_in)
        self.where_defined = lru_cache(maxsize=None)(self._where_defined)

    # -- modules ------------------------------------------------------------------------
    def module(self, name: str) -> Module | None:
        if name not in self._modules:
            path = self.sources.module_file(name)
            self._modules[name] = parsed(name, path, self.sources) if path else None
        return self._modules[name]

    def is_module(self, name: str) -> bool:
        return self.sources.module_file(name) is not None

    # -- names --------------------------------------------------------------------------
    def lookup(self, dotted: str) -> Found:
        """Resolve `vllm.a.b.Name.attr`: the longest module prefix, then names, then class members."""
        parts = dotted.split(".")
        if parts[0] != self.package:
            return Found(dotted, "external", why=f"not in {self.package}")
        for cut in range(len(parts), 0, -1):
            if self.is_module(".".join(parts[:cut])):
                break
        else:
            return Found(dotted, "missing", why=f"no module {parts[0]}")
        module = ".".join(parts[:cut])
        found = Found(module, "module", self.sources.module_file(module) or "", 1, module=module)
        for attr in parts[cut:]:
            found = self.member(found, attr)
            if found.kind in ("missing", "unknown", "external", "variable"):
                if found.kind == "variable" and attr != parts[-1]:
                    return Found(dotted, "unknown", found.file, found.line, module=found.module,
                                 why=f"{found.name} is a variable; its attributes are not known statically")
                break
        return found

    def member(self, owner: Found, attr: str) -> Found:
        if owner.kind == "module":
            return self.name_in(owner.name, attr)
        if owner.kind == "class":
            return self.class_member(owner, attr)
        return Found(f"{owner.name}.{attr}", "unknown", owner.file, owner.line, module=owner.module,
                     why=f"{owner.name} is a {owner.kind}")

    def _name_in(self, module_name: str, attr: str, depth: int = 0) -> Found:
        qual = f"{module_name}.{attr}"
        if depth > 30:
            return Found(qual, "unknown", why="re-export chain too long")
        module = self.module(module_name)
        if module is None:
            return Found(qual, "missing", why=f"no module {module_name}")
        binding = module.bindings.get(attr)
        if binding is not None:
            kind = binding[0]
            if kind == "def":
                node = binding[1]
                what = ("class" if isinstance(node, ast.ClassDef)
                        else "function" if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) else "variable")
                return Found(qual, what, module.path, node.lineno, node, module_name)
            if kind == "import":
                source, name = binding[1], binding[2]
                if not source.startswith(self.package):
                    return Found(qual, "external", module.path, binding[3], module=module_name,
                                 why=f"re-exported from {source}")
                if self.module(source) is not None:
                    found = self.name_in(source, name, depth + 1)
                    if found.kind != "missing":
                        return found
                if self.is_module(f"{source}.{name}"):
                    sub = f"{source}.{name}"
                    return Found(sub, "module", self.sources.module_file(sub) or "", 1, module=sub)
                return Found(qual, "missing", module.path, binding[3], module=module_name,
                             why=f"re-exported from {source}.{name}, which does not exist")
            if kind == "module":
                target = binding[1]
                if self.is_module(target):
                    return Found(target, "module", self.sources.module_file(target) or "", 1, module=target)
                return Found(qual, "external", module.path, binding[2], why=f"module {target}")
        if self.is_module(qual):
            return Found(qual, "module", self.sources.module_file(qual) or "", 1, module=qual)
        for star in module.star:
            if star.startswith(self.package) and self.module(star) is not None:
                found = self.name_in(star, attr, depth + 1)
                if found.kind != "missing":
                    return found
        if attr in module.lazy:
            target_module, _, target_attr = module.lazy[attr].partition(":")
            target_module = module._absolute(target_module.lstrip("."),
                                             len(target_module) - len(target_module.lstrip("."))) \
                if target_module.startswith(".") else target_module
            return self.lookup(f"{target_module}.{target_attr}" if target_attr else target_module)
        if module.has_getattr:
            return Found(qual, "unknown", module.path, 1, module=module_name,
                         why=f"{module_name} has a module __getattr__ that may supply it")
        return Found(qual, "missing", module.path, 0, module=module_name, why=f"{module_name} does not define {attr}")

    # -- classes ------------------------------------------------------------------------
    def bases(self, cls: Found) -> tuple[list[Found], list[str]]:
        """The class's bases resolved inside vLLM, and those outside it (by name)."""
        node = cls.node
        assert isinstance(node, ast.ClassDef)
        inside, outside = [], []
        for base in node.bases:
            name = _dotted(base)
            if not name or name in OPAQUE_BASES:
                continue
            found = self.resolve_in_module(cls.module, name)
            if found.kind == "class":
                inside.append(found)
            else:
                outside.append(name)
        return inside, outside

    def resolve_in_module(self, module_name: str, dotted: str) -> Found:
        head, _, rest = dotted.partition(".")
        found = self.name_in(module_name, head)
        for attr in rest.split(".") if rest else []:
            found = self.member(found, attr)
        return found

    def mro(self, cls: Found) -> tuple[list[Found], list[str]]:
        order, outside, seen = [], [], set()

        def visit(c: Found, depth: int) -> None:
            if (c.module, c.name) in seen or depth > 40:
                return
            seen.add((c.module, c.name))
            order.append(c)
            inside, out = self.bases(c)
            outside.extend(out)
            for base in inside:
                visit(base, depth + 1)

        visit(cls, 0)
        return order, outside

    def class_member(self, cls: Found, attr: str) -> Found:
        classes, outside = self.mro(cls)
        for c in classes:
            for stmt in c.node.body:
                if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and stmt.name == attr:
                    kind = "class" if isinstance(stmt, ast.ClassDef) else "function"
                    return Found(f"{c.name}.{attr}", kind, c.file, stmt.lineno, stmt, c.module, in_class=True)
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] \
                    if isinstance(stmt, ast.AnnAssign) else []
                if any(isinstance(t, ast.Name) and t.id == attr for t in targets):
                    return Found(f"{c.name}.{attr}", "variable", c.file, stmt.lineno, stmt, c.module)
        if self._assigns_self_attr(classes, attr):
            return Found(f"{cls.name}.{attr}", "variable", cls.file, cls.line, module=cls.module,
                         why="an instance attribute")
        if outside:
            return Found(f"{cls.name}.{attr}", "unknown", cls.file, cls.line, module=cls.module,
                         why=f"not in vLLM's part of the class; it also derives from {', '.join(sorted(set(outside)))}")
        return Found(f"{cls.name}.{attr}", "missing", cls.file, cls.line, module=cls.module,
                     why=f"{cls.name} ({cls.file}:{cls.line}) and its bases define no {attr}")

    @staticmethod
    def _assigns_self_attr(classes: list[Found], attr: str) -> bool:
        for c in classes:
            if id(c.node) not in _SELF_ATTRS:
                _SELF_ATTRS[id(c.node)] = {n.attr for n in ast.walk(c.node) if isinstance(n, ast.Attribute)
                                           and isinstance(n.ctx, ast.Store) and isinstance(n.value, ast.Name)
                                           and n.value.id == "self"}
            if attr in _SELF_ATTRS[id(c.node)]:
                return True
        return False

    def is_dataclass(self, cls: Found) -> bool:
        return any(_dotted(d).split(".")[-1] in {x.split(".")[-1] for x in DATACLASS_DECORATORS}
                   for d in cls.node.decorator_list)

    def signature(self, found: Found) -> Signature | None:
        """The call signature (for a class: of constructing it), or None when it cannot be told."""
        if found.kind == "function":
            return function_signature(found.node, found.file, drop_self=takes_self(found))
        if found.kind != "class":
            return None
        classes, outside = self.mro(found)
        for c in classes:
            init = next((s for s in c.node.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
            if init is not None:
                return function_signature(init, c.file, drop_self=True)
            if self.is_dataclass(c):
                return self.dataclass_signature(classes)
        if any(b.split(".")[-1] in {m.split(".")[-1] for m in MODEL_BASES} for b in outside):
            return self.dataclass_signature(classes, model=True)
        if outside:
            return None
        return Signature((), "object() (no __init__ in the class or its bases)", found.file, found.line)

    def dataclass_signature(self, classes: list[Found], model: bool = False) -> Signature:
        params: dict[str, Param] = {}
        for c in reversed(classes):
            kw_only = any(isinstance(d, ast.Call) and any(k.arg == "kw_only" and isinstance(k.value, ast.Constant)
                                                          and k.value.value for k in d.keywords)
                          for d in c.node.decorator_list) or model
            if not (self.is_dataclass(c) or model):
                continue
            for stmt in c.node.body:
                if not (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)):
                    continue
                annotation = ast.unparse(stmt.annotation)
                if re.match(r"(typing\.)?ClassVar\b", annotation):
                    continue
                required, init = stmt.value is None, True
                if isinstance(stmt.value, ast.Call) and _dotted(stmt.value.func) in FIELD_CALLS:
                    keywords = {k.arg: k.value for k in stmt.value.keywords}
                    init_kw = keywords.get("init")
                    init = not (isinstance(init_kw, ast.Constant) and init_kw.value is False)
                    required = not ({"default", "default_factory"} & set(keywords)) and not stmt.value.args
                if init:
                    params[stmt.target.id] = Param(stmt.target.id, "kwonly" if kw_only else "pos", required)
        first = classes[0]
        return Signature(tuple(params.values()), "pydantic model fields" if model else "dataclass fields",
                         first.file, first.line, extra=self.extra_policy(classes, model))

    def extra_policy(self, classes: list[Found], model: bool = False) -> str:
        """What constructing the class does with an unknown keyword, read from its decorators (feature
        detection, not versions): a stdlib dataclass refuses it; a pydantic dataclass (or model)
        ignores it unless configured with extra="forbid"; a vLLM decorator (`@config`) is followed
        into its definition: one that says extra="forbid" refuses, one that returns the class as is
        leaves it to the other decorators."""
        for c in classes:
            if model and "forbid" in ast.unparse(c.node):
                return "refused"
            for decorator in c.node.decorator_list:
                name = _dotted(decorator)
                if name.split(".")[-1] not in {d.split(".")[-1] for d in DATACLASS_DECORATORS}:
                    continue
                if "forbid" in ast.unparse(decorator):
                    return "refused"
                found = self.resolve_in_module(c.module, name)
                if found.kind == "function" and found.node is not None:
                    if "forbid" in ast.unparse(found.node):
                        return "refused"
                    continue  # e.g. 0.11's `config`, which returns the class untouched
                if found.kind == "external" and "pydantic" in (found.why or ""):
                    return "ignored"
                if found.kind == "external":
                    return "refused"  # the standard library's dataclass
        return "ignored" if model else "refused"

    # -- moved names --------------------------------------------------------------------
    def _where_defined(self, name: str) -> list[str]:
        """file:line of every top-level `def name` / `class name` in the release (a moved name)."""
        found = []
        for path in sorted(p for p in self.sources.paths if p.startswith(f"{self.package}/") and p.endswith(".py")):
            key = (path, tuple(self.sources.crcs.get(path) or (self.sources.filename,)))
            if key not in _DEFINED:
                text = self.sources.read(path)
                defined: dict[str, list[int]] = {}
                for match in _TOP_LEVEL_DEF.finditer(text):
                    defined.setdefault(match.group(1), []).append(text.count("\n", 0, match.start()) + 1)
                _DEFINED[key] = defined
            found += [f"{path}:{line}" for line in _DEFINED[key].get(name, ())]
        return found


_TOP_LEVEL_DEF = re.compile(r"^(?:async\s+def|def|class)\s+(\w+)", re.M)
_DEFINED: dict[tuple[str, tuple[Any, ...]], dict[str, list[int]]] = {}  # top-level names per (file, CRC), as _PARSED


def takes_self(found: Found) -> bool:
    """A method called on an instance or the class: its first parameter is bound (not a staticmethod)."""
    node = found.node
    if not (found.in_class and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))):
        return False
    return "staticmethod" not in {_dotted(d).split(".")[-1] for d in node.decorator_list}


def function_signature(node: ast.FunctionDef | ast.AsyncFunctionDef, file: str, drop_self: bool) -> Signature:
    a = node.args
    positional = [(p, "posonly") for p in a.posonlyargs] + [(p, "pos") for p in a.args]
    if drop_self and positional:
        positional = positional[1:]
    n_defaults = len(a.defaults)
    total = len(a.posonlyargs) + len(a.args)
    params = []
    offset = total - len(positional)
    for i, (p, kind) in enumerate(positional):
        params.append(Param(p.arg, kind, i + offset < total - n_defaults))
    if a.vararg:
        params.append(Param(a.vararg.arg, "varargs", False))
    for p, default in zip(a.kwonlyargs, a.kw_defaults):
        params.append(Param(p.arg, "kwonly", default is None))
    if a.kwarg:
        params.append(Param(a.kwarg.arg, "varkw", False))
    return Signature(tuple(params), "def", file, node.lineno)
