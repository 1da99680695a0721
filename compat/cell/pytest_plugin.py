"""pytest plugin: records each probe's outcome through hooks into a cell's probe-result file.

Probes stay plain pytest tests marked `@pytest.mark.probe("<id>")`. Outcome mapping:
- passed -> ok
- failed in the call, with the exception tagged by compat.shared.observe.speculators_call -> broken
- failed in setup/teardown, failed untagged (harness fault) or timed out -> error, with why
- skipped with reason "n/a: ..." -> n/a; "unsupported-on-cpu: ..." -> unsupported-on-cpu;
  "not selected: ..." (the cell's matrix entry left it out) -> skipped and advisory, so it decides
  nothing; any other skip -> skipped
The file is rewritten atomically after every probe, so a crash keeps what finished.

A data check puts the figures its verdict can be recomputed from (compat.cell.reference.figures)
in detail["figures"]; the record carries them at the top level, `figures`, and the adapted run's
in the raw record's `with_compat_figures` (null where a probe recorded none). What a run's engine showed
of the prompt shapes (the detail's keys compat.shared.records.SHAPES_KEYS names) goes the same way, into
`shapes` and `with_compat_shapes` (absent where a run recorded none).
"""

from __future__ import annotations

import re
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from compat.cell import steps
from compat.shared.observe import CONTRACT_TAG, describe
from compat.shared.records import split_shapes
from compat.shared.results import ADVISORY_PROBES, NOT_SELECTED, write_json_atomic
from compat.shared.tracebacks import ANSI, EXCEPTION_TYPE, RELAYS, Found, behind_missing_op, exception_type

# A vLLM process's printed exception: `(Worker pid=29099) ERROR 12-02 00:01:19 [<file>.py:852] RuntimeError: ...`,
# `(EngineCore_DP0 pid=7) ERROR ... [core.py:866] ValueError: ...`, `(VllmWorker rank=0 pid=9) ERROR ...`, or
# with no process prefix where the engine runs in the test's process (`ERROR 12-02 06:13:18
# [multiproc_executor.py:743] AttributeError: ...`: vLLM's logger, its date and file:line, never pytest's).
PRINTED_EXCEPTION = re.compile(r"^(?:\((?:Worker|EngineCore|VllmWorker|APIServer)[^)\n]*pid=\d+\)\s+ERROR\b[^\]\n]*"
                               r"|ERROR \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? \[[\w.]+:\d+)\]\s*"
                               rf"{EXCEPTION_TYPE}: (?P<message>.+)$", re.M)
SKIP_PREFIXES = {"n/a:": "n/a", "unsupported-on-cpu:": "unsupported-on-cpu"}
RECORD_KEY = pytest.StashKey[dict]()


@dataclass
class CellProbes:
    """This run's plugin state (config.stash): what was collected, each probe's record so far, and when the
    first probe began (the cell's startup ends there)."""
    collected: list[dict[str, Any]] = field(default_factory=list)
    records: list[dict[str, Any]] = field(default_factory=list)
    first_probe_at: float | None = None


CELL_PROBES_KEY = pytest.StashKey[CellProbes]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("compat")
    group.addoption("--compat-result", default=None, help="write probe results to this JSON file")
    group.addoption("--compat-label", default="", help="cell label for progress lines")


MARKERS = ("probe(id, data=False, advisory=False, composite=False, variant=None, contract=None, since=0): the stable "
           "probe id this test reports as, and what the harness holds about it (compat.shared.probe_catalog)",
           "tp(n): tensor-parallel size the probe case needs",
           "compat_mode(mode): 'with_compat' runs fill the raw record's with_compat")


def register_markers(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def pytest_configure(config: pytest.Config) -> None:
    register_markers(config)
    config.stash[CELL_PROBES_KEY] = CellProbes()


def pytest_collection_finish(session: pytest.Session) -> None:
    """Record what will run, so probes a crash never reached can be reported as `error`."""
    session.config.stash[CELL_PROBES_KEY].collected = [
        {k: _record(item)[k] for k in ("id", "case", "advisory")} for item in session.items
        if not _is_with_compat(item)
    ]
    _write(session.config)


@pytest.fixture
def probe_detail(request: pytest.FixtureRequest) -> dict[str, Any]:
    """A dict a probe fills with what it observed; it lands in the result's `detail`."""
    return _record(request.node)["detail"]


def _record(item: pytest.Item) -> dict[str, Any]:
    if RECORD_KEY not in item.stash:
        marker = item.get_closest_marker("probe")
        probe_id = marker.args[0] if marker else item.name
        callspec = getattr(item, "callspec", None)
        tp = item.get_closest_marker("tp")
        params = {k: v for k, v in (callspec.params.items() if callspec else []) if k != "compat_mode"}
        case = "-".join(filter(None, [*(str(v) for v in params.values()), f"tp{tp.args[0]}" if tp else None]))
        item.stash[RECORD_KEY] = {
            "id": probe_id,
            "case": case or None,
            "status": None,
            "with_compat": None,
            "advisory": probe_id in ADVISORY_PROBES,
            "error": None,
            "reason": None,
            "seconds": 0.0,
            "nodeids": [item.nodeid],
            "detail": {},
            "figures": None,
            "with_compat_figures": None,
        }
    return item.stash[RECORD_KEY]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo):
    report = yield
    record = _record(item)
    if record["status"] not in (None, "ok"):
        return report
    if report.passed and report.when == "call":
        record["status"] = "ok"
    elif report.skipped:
        reason = _skip_reason(report)
        record["status"] = next((s for p, s in SKIP_PREFIXES.items() if reason.startswith(p)), "skipped")
        record["reason"] = reason
        if reason.startswith(NOT_SELECTED):
            record["advisory"] = True
    elif report.failed:
        exc = call.excinfo.value if call.excinfo else None
        text = str(exc) if exc is not None else str(report.longrepr)
        if report.when == "call" and exc is not None and hasattr(exc, CONTRACT_TAG):
            record["status"] = "broken"
            record["error"] = _with_root_cause(describe(exc), report, exc)
        elif text.lstrip().startswith("Timeout"):
            record["status"] = "error"
            record["reason"] = f"timeout: {text.strip().splitlines()[0]}"
        else:
            record["status"] = "error"
            phase = {"setup": "could not set up", "teardown": "failed in teardown"}.get(
                report.when, "harness fault")
            record["reason"] = f"{phase}: {type(exc).__name__ if exc else 'error'}: {text.strip()[:1500]}"
            if exc is not None:
                record["error"] = _with_root_cause(describe(exc), report, exc)
    return report


# The root cause kept for an exception object: a fixture that re-raises the one exception its construction
# raised (compat.cell.datagen.Generator.generate) fails later tests with that same object, and vLLM's
# processes print nothing new then; the object is the evidence that the cause is the one kept before.
_ROOTS: dict[int, tuple[BaseException, str]] = {}


def _with_root_cause(error: dict[str, Any], report: pytest.TestReport,
                     exc: BaseException | None = None) -> dict[str, Any]:
    """Where vLLM says the cause was raised in another of its processes, the last exception those
    processes printed during this test (its captured output), so the report can tell an environment
    fault (a library the build requires) from a break of the contract: the last one that does not
    itself relay, else the last relay. (One test's output is not a whole log: that nothing was printed
    here is no evidence a process died silently, so no `silent_death` is read from it.) A compiled op
    found missing, where vLLM logged that it could not load that library, reads as that load failure.
    The same exception object raised again in a later test keeps the root cause kept for it (`_ROOTS`)."""
    if not RELAYS.search(f"{error.get('type')}: {error.get('message') or ''}"):  # vLLM points elsewhere
        return error
    output = ANSI.sub("", "\n".join(text for _title, text in report.sections))  # vLLM 0.11 colours the prefix
    printed = [Found(exception_type(m), m["message"].strip(), None, output.count("\n", 0, m.start()) + 1)
               for m in PRINTED_EXCEPTION.finditer(output)]
    causes = [found for found in printed if not found.wrapper]
    if causes or printed:
        root = behind_missing_op((causes or printed)[-1], output)  # a compiled library vLLM could not load
        error["root_cause"] = f"{root.type}: {root.message}"[:1000]
        if exc is not None:
            _ROOTS[id(exc)] = (exc, error["root_cause"])
    elif exc is not None and _ROOTS.get(id(exc), (None,))[0] is exc:  # the same object raised again
        error["root_cause"] = _ROOTS[id(exc)][1]
    return error


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        text = longrepr[2]
    else:
        text = str(longrepr)
    return text.removeprefix("Skipped: ").strip()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    started = time.monotonic()
    state = item.config.stash[CELL_PROBES_KEY]
    if state.first_probe_at is None:
        state.first_probe_at = time.time()  # the harness: startup
    result = yield
    record = _record(item)
    record["seconds"] = round(time.monotonic() - started, 3)
    if record["status"] is None:
        record["status"] = "error"
        record["reason"] = "the probe produced no outcome"
    _lift_figures(record)
    config = item.config
    records = state.records
    kept = _merge_with_compat(records, record) if _is_with_compat(item) else _add_raw(records, record)
    _write(config)
    if kept is not None:
        _progress(config, kept)
    return result


def _is_with_compat(item: pytest.Item) -> bool:
    marker = item.get_closest_marker("compat_mode")
    callspec = getattr(item, "callspec", None)
    mode = marker.args[0] if marker else (callspec.params.get("compat_mode") if callspec else None)
    return mode == "with_compat"


def _same_probe(records: list[dict[str, Any]], record: dict[str, Any]) -> dict[str, Any] | None:
    return next((r for r in records if (r["id"], r["case"]) == (record["id"], record["case"])), None)


def _add_raw(records: list[dict[str, Any]], record: dict[str, Any]) -> dict[str, Any] | None:
    """Two suites may report the same (id, case), one per profile (compat/cell/probes/in_process in-process,
    compat/cell/probes/server for speculators >= 0.5): the run where the contract applies wins over `n/a`,
    whichever came first, and each (id, case) appears once."""
    existing = _same_probe(records, record)
    if existing is None:
        records.append(record)
        return record
    if existing["status"] == "n/a" and record["status"] != "n/a":
        records[records.index(existing)] = record
        return record
    return None


def _lift_figures(record: dict[str, Any]) -> dict[str, Any]:
    """detail["figures"] (what a data check recorded) becomes the record's `figures`, stored once; the
    shapes its engine showed, the record's `shapes`."""
    detail = record.get("detail")
    if isinstance(detail, dict) and "figures" in detail:
        record["figures"] = detail.pop("figures")
    else:
        record.setdefault("figures", None)
    record.setdefault("with_compat_figures", None)
    if isinstance(record.get("detail"), dict):
        record["detail"], shapes = split_shapes(record["detail"])
        if shapes is not None:
            record["shapes"] = shapes
    return record


def _merge_with_compat(records: list[dict[str, Any]], adapted: dict[str, Any]) -> dict[str, Any] | None:
    """The adapted run of a probe fills `with_compat` of the raw run's record, its figures
    the raw record's `with_compat_figures` and its shapes `with_compat_shapes`."""
    _lift_figures(adapted)
    raw = _same_probe(records, adapted)
    if raw is not None and adapted["status"] == "n/a" and raw["status"] != "n/a":
        return None  # the other suite's adapted run of a probe that does not apply there
    if raw is None:
        raw = {**{k: v for k, v in adapted.items() if k != "shapes"}, "status": "error",
               "reason": "the raw run of this probe did not report", "error": None, "detail": {}, "figures": None}
        records.append(raw)
    raw["with_compat"] = adapted["status"]
    raw["with_compat_figures"] = adapted["figures"]
    if adapted.get("shapes") is not None:
        raw["with_compat_shapes"] = adapted["shapes"]
    raw["detail"]["with_compat"] = {k: adapted[k] for k in ("status", "error", "reason", "detail")}
    raw["seconds"] = round(raw["seconds"] + adapted["seconds"], 3)
    raw["nodeids"] = list(dict.fromkeys([*raw.get("nodeids", []), *adapted.get("nodeids", [])]))
    return raw


def _write(config: pytest.Config) -> None:
    path = config.getoption("compat_result")
    if path:
        state = config.stash[CELL_PROBES_KEY]
        write_json_atomic(Path(path), {"collected": state.collected, "probes": state.records,
                                       "first_probe_at": state.first_probe_at, "steps": steps.LEDGER})


def _progress(config: pytest.Config, record: dict[str, Any]) -> None:
    label = config.getoption("compat_label")
    name = f"{record['id']}[{record['case']}]" if record["case"] else record["id"]
    why = ""
    if record["error"]:
        why = f" — {record['error']['type']}: {(record['error']['message'] or '').partition(chr(10))[0][:160]}"
    elif record["reason"]:
        why = f" — {record['reason'].splitlines()[0][:160]}"
    status = record["status"] if record["with_compat"] is None else \
        f"{record['status']}, with compat: {record['with_compat']}"
    sys.__stderr__.write(f"[compat] {label} {name}: {status} ({record['seconds']:.1f}s){why}\n")
    sys.__stderr__.flush()
