"""Result records: the words a verdict may use, atomic JSON I/O (the verdict rule is compat.harness.verdict).

Shape of one cell record (the contract of ../shared/DESIGN.md plus extra keys):

    {"id": "vllm-0.16.0__speculators-0.3.0__cpu",
     "vllm": "0.16.0", "speculators": "0.3.0", "backend": "cpu",
     "profile": "generator-0.3", "verdict": "incompatible",
     "env": {"python", "torch", "transformers", "vllm_dist", "speculators"},
     "seconds": {"install": float, "probes": float},
     "env_shims": [{"id", "why"}],
     "install_log_tail": str | None, "error": str | None,
     "probes": [{"id", "case", "status", "with_compat", "advisory",
                 "error": {"type", "message", "where"} | None,
                 "reason": str | None, "seconds": float, "detail": {}}]}

The merged report is {"harness_version", "generated_at", "machine", "cells": [...], "kimi": {...}}.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

PROBE_STATUSES = ("ok", "broken", "error", "skipped", "n/a", "unsupported-on-cpu")
CELL_VERDICTS = (
    "compatible",
    "compatible-with-compat",
    "incompatible",
    "unsupported-on-cpu",
    "install-error",
    "error",
    "untested-at-runtime",  # no runtime cell could run (no build of that release here): the static layer alone
)
ADVISORY_PROBES = frozenset({"worker_logging"})
# The skip reason of a probe the cell chose not to run (a server-era variant its matrix entry left
# out): `skipped` and advisory, it decides nothing.
NOT_SELECTED = "not selected:"


class ResultFileError(ValueError):
    """A result file that cannot be read or does not have the expected shape."""


def probe_key(probe: dict[str, Any]) -> str:
    """`id` or `id[case]`: unique within a cell."""
    case = probe.get("case")
    return f"{probe['id']}[{case}]" if case else probe["id"]


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader (or a crash) never sees half a file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(data, handle, indent=1, sort_keys=False)
            handle.write("\n")
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_json(path: Path, what: str) -> Any:
    """Read a JSON file, naming the file and what was expected when it cannot be read."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise ResultFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultFileError(
            f"{what} {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc


def load_cell(path: Path) -> dict[str, Any]:
    """One cell record from results/<cell>.json, checked for the keys the report needs."""
    cell = read_json(path, "cell result")
    if not isinstance(cell, dict):
        raise ResultFileError(f"cell result {path} holds a {type(cell).__name__}, expected an object")
    missing = [k for k in ("vllm", "speculators", "verdict", "probes") if k not in cell]
    if missing:
        raise ResultFileError(f"cell result {path} lacks key(s) {', '.join(missing)}")
    if cell["verdict"] not in CELL_VERDICTS:
        raise ResultFileError(
            f"cell result {path} has verdict {cell['verdict']!r}; expected one of {', '.join(CELL_VERDICTS)}"
        )
    for probe in cell["probes"]:
        if probe.get("status") not in PROBE_STATUSES:
            raise ResultFileError(
                f"cell result {path}: probe {probe.get('id')!r} has status {probe.get('status')!r}; "
                f"expected one of {', '.join(PROBE_STATUSES)}"
            )
    return cell


def load_report(path: Path) -> dict[str, Any]:
    """A merged reports/compat.json (e.g. a --baseline), checked for its top-level shape."""
    report = read_json(path, "report")
    if not isinstance(report, dict) or not isinstance(report.get("cells"), list):
        raise ResultFileError(f"report {path} is not an object with a 'cells' list")
    return report
