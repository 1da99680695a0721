"""Result records: the words a verdict may use, atomic JSON I/O (the verdict rule is compat.harness.verdict).

A cell record's shape is the typed classes of compat.shared.records (CellRecord, ProbeRecord,
Figures, Manifest), committed as JSON Schema in docs/record.schema.json; `load_cell` validates
every file against them and returns the typed record.

The merged report is {"harness_version", "generated_at", "machine", "cells": [...], "kimi": {...}}.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import tempfile
import zlib
from pathlib import Path
from typing import Any

from compat.shared.probe_catalog import ids_where
from compat.shared.records import CellRecord, RecordError, Verdict, load_record
from compat.shared.records import probe_key as probe_key  # re-exported: the report and the tests import it from here

# untested-at-runtime: no runtime cell could run (no build of that release here): the static layer alone
CELL_VERDICTS = tuple(v.value for v in Verdict)
# Probes that never decide a verdict: marked @pytest.mark.probe(..., advisory=True).
ADVISORY_PROBES = ids_where("advisory")
# The skip reason of a probe the cell chose not to run (a server-era variant its matrix entry left
# out): `skipped` and advisory, it decides nothing.
NOT_SELECTED = "not selected:"


# The most bytes a result file, a document or a merged report may hold. The largest any run has written is
# under 1 MiB (a merged compat.json of many GPU cells, 0.4 MiB; one cell record, 0.3 MiB), so 64 MiB is
# generous for every genuine input, and a bound all the same: a result name that is a link to an endless
# stream, or a file grown without end, is refused by name instead of read until memory runs out.
MAX_INPUT_BYTES = 64 * 1024 * 1024
_NOT_REGULAR = ((stat.S_ISDIR, "a directory"), (stat.S_ISCHR, "a character device"),
                (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                (stat.S_ISSOCK, "a socket"))


class ResultFileError(ValueError):
    """A result file that cannot be read or does not have the expected shape."""


def read_bounded(path: Path, what: str, limit: int | None = None) -> bytes:
    """The bytes of a regular file (a link to one is followed) of at most `limit` bytes (MAX_INPUT_BYTES
    unless given). Anything else (a device such as /dev/zero, a FIFO, a directory, a larger file) is
    refused without being read: ResultFileError names the file, why, and what would be accepted."""
    path, limit = Path(path), MAX_INPUT_BYTES if limit is None else limit
    bound = f"{limit >> 20} MiB" if limit and limit % (1 << 20) == 0 else f"{limit} bytes"
    accepted = f"expected a regular file of at most {bound}"
    try:  # O_NONBLOCK: a FIFO opens at once (to be refused below) instead of waiting for a writer
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise ResultFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            kind = next((name for test, name in _NOT_REGULAR if test(info.st_mode)), "not a regular file")
            link = f", a link to {os.readlink(path)}" if path.is_symlink() else ""
            raise ResultFileError(f"{what} {path} is {kind}{link}, not read; {accepted}")
        if info.st_size <= limit:
            try:
                with open(fd, "rb", closefd=False) as handle:
                    data = handle.read(limit + 1)  # one byte more: a file that grew since fstat is refused too
            except OSError as exc:
                raise ResultFileError(f"cannot read {what} {path}: {exc.strerror or exc}") from exc
            if len(data) <= limit:
                return data
    finally:
        os.close(fd)
    held = f"more than {limit}" if info.st_size <= limit else str(info.st_size)
    raise ResultFileError(f"{what} {path} holds {held} bytes, over the bound of {limit} "
                          f"(compat.shared.results.MAX_INPUT_BYTES), not read; {accepted}")


# The mode of every file the atomic writers leave (mkstemp's own is 0600): readable by all, as `git checkout`
# and `cp` leave a file, so a published support.json or a record copied elsewhere reads the same for everyone.
FILE_MODE = 0o644


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write bytes so that a reader (or a crash) never sees half a file; the file is FILE_MODE."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, FILE_MODE)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str) -> None:
    """Write UTF-8 text atomically (write_bytes_atomic)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON so that a reader (or a crash) never sees half a file; the file is FILE_MODE."""
    write_text_atomic(path, json.dumps(data, indent=1, sort_keys=False) + "\n")


GZIP_SUFFIX = ".gz"  # committed evidence is kept compressed (a log as probes.log.gz): read_evidence reads either


def evidence_path(path: Path) -> Path:
    """The file, else its compressed copy (`<name>.gz`) where only that is kept: the one place that knows a
    log, a record or a document named by its plain name may be committed gzip'd."""
    path = Path(path)
    if path.name.endswith(GZIP_SUFFIX) or path.exists():
        return path
    packed = path.with_name(path.name + GZIP_SUFFIX)
    return packed if packed.exists() else path


# A cell record is `<cell-id>.json`, or kept compressed as `<cell-id>.json.gz` (published/results/: issue 45);
# every reader lists a folder's records with record_files and names them with record_stem.
RECORD_SUFFIXES = (".json.gz", ".json")


def record_stem(path: Path) -> str:
    """The cell id a record file is named for: `<id>.json` or `<id>.json.gz` -> `<id>`."""
    name = Path(path).name
    return next((name[: -len(s)] for s in RECORD_SUFFIXES if name.endswith(s)), Path(path).stem)


def record_files(folder: Path, pattern: str = "*") -> list[Path]:
    """The record files of a folder whose cell id matches `pattern` (a glob), plain or compressed, in id order
    (a dotfile is no record). A cell kept twice (its .json beside its .json.gz) is refused: which one a reader took
    would decide its answer."""
    found = {p for suffix in RECORD_SUFFIXES for p in Path(folder).glob(pattern + suffix)
             if not p.name.startswith(".")}  # a device, a FIFO or a directory is listed: read_bounded refuses it
    listed = sorted(found, key=lambda p: (record_stem(p), p.name))
    for first, second in zip(listed, listed[1:]):
        if record_stem(first) == record_stem(second):
            raise ResultFileError(f"{folder}: cell {record_stem(first)} is kept twice ({first.name} and "
                                  f"{second.name}); keep one (`python -m compat publish` keeps the .json.gz)")
    return listed


def gzip_bytes(data: bytes) -> bytes:
    """gzip at level 9 with no file name and time 0 in the header: the same input, the same bytes."""
    return gzip.compress(data, compresslevel=9, mtime=0)


def read_evidence(path: Path, what: str, limit: int | None = None) -> bytes:
    """The bytes of a file or of its `.gz` (evidence_path), decompressed; read_bounded's bound holds for
    the compressed file and for what it decompresses to (a small .gz of endless zeros is refused too)."""
    found = evidence_path(path)
    data = read_bounded(found, what, limit)
    if not found.name.endswith(GZIP_SUFFIX):
        return data
    bound = MAX_INPUT_BYTES if limit is None else limit
    try:
        inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)  # the gzip container
        plain = inflate.decompress(data, bound + 1)
    except zlib.error as exc:
        raise ResultFileError(f"{what} {found} is not a readable gzip file ({exc}); expected <name>.gz "
                              f"as gzip writes it") from exc
    if len(plain) > bound or inflate.unconsumed_tail:
        raise ResultFileError(f"{what} {found} decompresses to more than {bound} bytes, over the bound "
                              f"(compat.shared.results.MAX_INPUT_BYTES), not read")
    return plain


def read_json(path: Path, what: str) -> Any:
    """Read a JSON file, or its `.gz` (read_evidence: a regular file within the size bound), naming the
    file and what was expected when it cannot be read."""
    path = Path(path)
    data = read_evidence(path, what)
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


def load_cell(path: Path) -> CellRecord:
    """One cell record from results/<cell>.json, validated against compat.shared.records.CellRecord
    (schemas 1, 2 and 3 migrated) and typed; a record that fails names the file and the field. A reader not yet typed
    takes its JSON where it calls (records.to_json writes back what was read, key for key)."""
    try:
        return load_record(read_json(path, "cell result"), source=f" ({path})")
    except RecordError as exc:
        raise ResultFileError(f"cell result {path}: {exc} (schema: docs/record.schema.json)") from exc


def load_report(path: Path) -> dict[str, Any]:
    """A merged reports/compat.json (e.g. a --baseline), checked for its top-level shape."""
    report = read_json(path, "report")
    if not isinstance(report, dict) or not isinstance(report.get("cells"), list):
        raise ResultFileError(f"report {path} is not an object with a 'cells' list")
    return report
