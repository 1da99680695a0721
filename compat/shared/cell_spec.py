"""One cell's settings, as the harness hands them to the probes: one JSON file per probe run,
whose path is the one variable the cell reads (COMPAT_CELL_SPEC).

The runner (compat.harness.cell_run) and the Kimi suite (compat.harness.kimi) write it; the probes'
conftest loads it into the `cell_spec` fixture and passes what each function needs as arguments
(as vLLM's tests pass dtype to HfRunner/VllmRunner). A file that is missing, not JSON, or holds a
field of the wrong kind or an unknown one is refused naming the file, the field and what is accepted.
"""

from __future__ import annotations

import dataclasses
import json
import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Optional, TypeVar

from compat.shared.axes import BACKENDS as BACKENDS  # cell_spec.BACKENDS and DTYPES: the names compat.shared.axes holds
from compat.shared.axes import DEFAULT_DTYPE
from compat.shared.axes import DTYPES as DTYPES

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

_Spec = TypeVar("_Spec", bound="DataclassInstance")

SPEC_VARIABLE = "COMPAT_CELL_SPEC"
SPEC_VERSION = 1


class CellSpecError(ValueError):
    """The spec file cannot be used; the message names the file, the field and what would be accepted."""


@dataclass(frozen=True)
class KimiSuiteSpec:
    """What the gated Kimi suite runs (compat/cell/probes/kimi): `skip` closes the gate (every test
    skipped with that reason); else the model, its layers and TP."""
    skip: str = ""
    model: str = ""
    tp: int = 1
    layers: tuple[int, ...] = ()
    hidden_size: int = 0
    scale: bool = False  # the tiny scale model (--scale-model) rather than the real one
    dtype: str = ""  # "" lets the suite choose: float32 on the scale model, "auto" (16-bit) on Kimi
    reference: Optional[bool] = None  # compared with transformers; None: on the scale model only
    no_reference: str = ""  # why not, where not

    @property
    def run_dtype(self) -> str:
        return self.dtype or ("float32" if self.scale else "auto")

    @property
    def with_reference(self) -> bool:
        return self.scale if self.reference is None else self.reference


@dataclass(frozen=True)
class CellSpec:
    cell_id: str
    vllm: str
    speculators: str
    backend: str
    model_dir: str  # the model the probes load (the runner's --model, else the tiny Llama)
    work_dir: str  # the cell's folder under results/: server logs, storage, pids
    dtype: str = DEFAULT_DTYPE  # vLLM's dtype for the data checks (the reference stays float32)
    variants: Optional[tuple[str, ...]] = None  # the server-era variants served; None: every one
    gpu_memory_utilization: Optional[float] = None  # per cell; None: vLLM's default (0.8)
    serve_args: tuple[str, ...] = ()  # added to every `vllm serve` (an environment's own needs)
    omp_bind_tp1: str = "auto"  # VLLM_CPU_OMP_THREADS_BIND for a TP=1 engine on CPU
    cache_dir: str = ""  # COMPAT_CACHE_DIR: holds models/, where the cell builds its tiny models; "" the default
    probe_timeout: int = 300
    cell_timeout: int = 1200
    kimi: Optional[KimiSuiteSpec] = None
    version: int = SPEC_VERSION

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise CellSpecError(f"backend {self.backend!r}: expected one of {', '.join(BACKENDS)}")
        if self.dtype not in DTYPES:
            raise CellSpecError(f"dtype {self.dtype!r}: expected one of {', '.join(DTYPES)}")
        if self.gpu_memory_utilization is not None and not 0 < self.gpu_memory_utilization <= 1:
            raise CellSpecError(f"gpu_memory_utilization {self.gpu_memory_utilization!r}: "
                                "expected a fraction in (0, 1]")

    @property
    def model_cache(self) -> Optional[Path]:
        """Where tiny models are built (compat.fixtures' cache_root), None for the fixtures' default."""
        return Path(self.cache_dir) / "models" if self.cache_dir else None

    def memory_fraction(self, default: float) -> float:
        return self.gpu_memory_utilization if self.gpu_memory_utilization is not None else default

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def write(self, path: Path) -> Path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_json(), indent=2, sort_keys=True) + "\n")
        return path

    @classmethod
    def from_json(cls, data: Any, source: str = "the cell spec") -> "CellSpec":
        if not isinstance(data, dict):
            raise CellSpecError(f"{source}: expected a JSON object, found {type(data).__name__}")
        if data.get("version", SPEC_VERSION) != SPEC_VERSION:
            raise CellSpecError(f"{source}: spec version {data.get('version')!r}; this checkout reads version "
                                f"{SPEC_VERSION} (the harness and the cell run from different checkouts?)")
        return _build(cls, data, source)


def load_spec(path: Path | str) -> CellSpec:
    source = str(path)
    try:
        data = json.loads(Path(path).read_text())
    except FileNotFoundError:
        raise CellSpecError(f"{SPEC_VARIABLE}={source}: no such file; the harness writes one per probe run "
                            "(<the cell's work dir>/probes.cell-spec.json)") from None
    except (OSError, json.JSONDecodeError) as exc:
        raise CellSpecError(f"{source}: not a readable JSON cell spec ({exc})") from None
    return CellSpec.from_json(data, source)


def spec_from_environment(environ: Mapping[str, str] = os.environ) -> CellSpec:
    """The spec the harness gave this process (its path in COMPAT_CELL_SPEC)."""
    path = environ.get(SPEC_VARIABLE)
    if not path:
        raise CellSpecError(f"{SPEC_VARIABLE} is not set: the probes run inside a cell, started by "
                            "`python -m compat run` (or compat.kimi), which writes the spec and names it there")
    return load_spec(path)


_JSON_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _build(cls: type[_Spec], values: Any, source: str) -> _Spec:
    """cls(**values), each value checked against its field's type (str, int, float, bool, tuples of
    those, Optional of them, a nested spec); lists read from JSON become tuples."""
    if not isinstance(values, dict):
        raise CellSpecError(f"{source}: expected a JSON object, found {type(values).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(fields))
    if unknown:
        raise CellSpecError(f"{source}: unknown field(s) {', '.join(unknown)}; accepted: {', '.join(fields)}")
    missing = [n for n, f in fields.items() if n not in values and f.default is dataclasses.MISSING]
    if missing:
        raise CellSpecError(f"{source}: missing field(s) {', '.join(missing)}")
    hints = typing.get_type_hints(cls)
    out = {name: _value(hints[name], value, f"{source}: {name}") for name, value in values.items()}
    try:
        return cls(**out)
    except CellSpecError as exc:
        raise CellSpecError(f"{source}: {exc}") from None


def _value(tp: Any, value: Any, where: str) -> Any:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:
        if value is None:
            return None
        tp = next(a for a in args if a is not type(None))
        origin, args = typing.get_origin(tp), typing.get_args(tp)
    if value is None:
        raise CellSpecError(f"{where} is null; expected {_name(tp)}")
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return _build(tp, value, where)
    if origin is tuple:
        if not isinstance(value, (list, tuple)) or not all(_is(v, args[0]) for v in value):
            raise CellSpecError(f"{where} is {value!r}; expected a list of {_name(args[0])}")
        return tuple(value)
    if not _is(value, tp):
        raise CellSpecError(f"{where} is {value!r}; expected {_name(tp)}")
    return value


def _is(value: Any, tp: type) -> bool:
    if isinstance(value, bool):
        return tp is bool
    return isinstance(value, (int, float) if tp is float else tp)


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of the spec file, from the same type hints the loader checks."""
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://vllm-spec-compat/cell-spec.schema.json#v{SPEC_VERSION}",
            "title": "vllm-spec-compat cell spec", "description": __doc__.split("\n\n")[0],
            **_object_schema(CellSpec), "$defs": {"KimiSuiteSpec": _object_schema(KimiSuiteSpec)}}


def _object_schema(cls: type[DataclassInstance]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    fields = dataclasses.fields(cls)
    return {"type": "object", "properties": {f.name: _type_schema(hints[f.name]) for f in fields},
            "required": [f.name for f in fields if f.default is dataclasses.MISSING],
            "additionalProperties": False}


def _type_schema(tp: Any) -> dict[str, Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Union:
        return {"anyOf": [_type_schema(next(a for a in args if a is not type(None))), {"type": "null"}]}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        return {"$ref": f"#/$defs/{tp.__name__}"}
    if origin is tuple:
        return {"type": "array", "items": _type_schema(args[0])}
    return {"type": _JSON_TYPES[tp]}


if __name__ == "__main__":  # python -m compat.shared.cell_spec > docs/cell-spec.schema.json
    print(json.dumps(json_schema(), indent=1))
