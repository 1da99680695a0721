"""Result records: the words a verdict may use, atomic JSON I/O (the verdict rule is compat.harness.verdict).

A cell record's shape is the typed classes of compat.shared.records (CellRecord, ProbeRecord,
Figures, Manifest), committed as JSON Schema in docs/record.schema.json; `load_cell` validates
every file against them.

The merged report is {"harness_version", "generated_at", "machine", "cells": [...], "kimi": {...}}.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from compat.shared.probe_catalog import ids_where
from compat.shared.records import RecordError, Verdict, validate_cell
from compat.shared.records import probe_key as probe_key  # re-exported: the report and the tests import it from here

# untested-at-runtime: no runtime cell could run (no build of that release here): the static layer alone
CELL_VERDICTS = tuple(v.value for v in Verdict)
# Probes that never decide a verdict: marked @pytest.mark.probe(..., advisory=True).
ADVISORY_PROBES = ids_where("advisory")
# The skip reason of a probe the cell chose not to run (a server-era variant its matrix entry left
# out): `skipped` and advisory, it decides nothing.
NOT_SELECTED = "not selected:"


class ResultFileError(ValueError):
    """A result file that cannot be read or does not have the expected shape."""


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
        data = path.read_bytes()
    except OSError as exc:
        raise ResultFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ResultFileError(f"{what} {path} is not UTF-8 (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
                              f"expected a UTF-8 JSON file") from exc
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise ResultFileError(
            f"{what} {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})"
        ) from exc


def load_cell(path: Path) -> dict[str, Any]:
    """One cell record from results/<cell>.json, validated against compat.shared.records.CellRecord
    (schema 1 migrated); a record that fails names the file and the field."""
    try:
        return validate_cell(read_json(path, "cell result"), source=f" ({path})")
    except RecordError as exc:
        raise ResultFileError(f"cell result {path}: {exc} (schema: docs/record.schema.json)") from exc


def load_report(path: Path) -> dict[str, Any]:
    """A merged reports/compat.json (e.g. a --baseline), checked for its top-level shape."""
    report = read_json(path, "report")
    if not isinstance(report, dict) or not isinstance(report.get("cells"), list):
        raise ResultFileError(f"report {path} is not an object with a 'cells' list")
    return report
