"""Every cell run kept, in one SQLite file: nothing is overwritten, a re-run adds a run.

    store = Store.open()                      # $COMPAT_STORE, else .compat/results.sqlite beside results/
    store.add_run(record, ran_at=...)         # a cell record (compat.shared.records.CellRecord), kept as its JSON
    store.import_dir(Path("results"))         # results/*.json, results/kimi*.json, results/bisect/speculators-*.json
    store.newest()                            # the newest run of every cell id
    store.export_dir(Path("out"))             # back to <cell-id>.json files

A run is keyed by its cell id (ids carry every non-default setting, so a bfloat16 run is another
key) and identified by the hash of its record's content: importing the same file twice, or the
results folder a run already stored, adds nothing. Each run keeps its settings, the harness commit
and machine that ran it and when it finished, as the record states them (`harness_commit`,
`machine`, `finished_at`, written by the runner); for an older record that does not, the file's
modification time and `unknown (stored by <commit>)`. The Kimi record and the bisect tables are kept the same way, as
documents, newest per name.

The store lives with the project's results (`.compat/results.sqlite` in the working directory, beside
`results/`, as `.pytest_cache` does); the per-user store (`--store user`: the harness's cache folder,
shared by every project) is opt-in. `import_dir` says which runs and documents a folder held, so a
report can show exactly those (compat.harness.report.publish.Selection).
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import sqlite3
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from compat.harness.pypi import default_cache_dir
from compat.shared.records import CellRecord, RecordError, build, load_record, to_json
from compat.shared.results import ResultFileError, load_cell, read_json, record_files, record_stem, write_json_atomic

STORE_ENV = "COMPAT_STORE"
USER_STORE = "user"  # `--store user` / COMPAT_STORE=user: the per-user store in the harness's cache folder
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    cell_id TEXT NOT NULL,
    content_hash TEXT NOT NULL UNIQUE,
    ran_at TEXT NOT NULL,
    stored_at TEXT NOT NULL,
    harness_commit TEXT NOT NULL,
    machine TEXT NOT NULL,
    settings TEXT NOT NULL,
    source TEXT NOT NULL,
    record TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_by_cell ON runs (cell_id, ran_at);
CREATE TABLE IF NOT EXISTS documents (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    kind TEXT NOT NULL,
    name TEXT NOT NULL,
    content_hash TEXT NOT NULL UNIQUE,
    ran_at TEXT NOT NULL,
    source TEXT NOT NULL,
    data TEXT NOT NULL
);
"""
KIMI, BISECT, SUPPORT = "kimi", "bisect", "support"


def default_store_path(results: Path = Path("results")) -> Path:
    """$COMPAT_STORE where set, else the project's own store beside its results folder."""
    return store_path(os.environ.get(STORE_ENV) or None, results)


def store_path(given: str | Path | None, results: Path = Path("results")) -> Path:
    """What `--store` names: a file, `user` (the per-user store), or nothing: `.compat/results.sqlite`
    beside the command's own results folder."""
    if given is None:
        return Path(results).parent / ".compat" / "results.sqlite"
    if str(given) == USER_STORE:
        return default_cache_dir() / "results.sqlite"
    return Path(given)


def now() -> str:
    return _iso(_dt.datetime.now(_dt.timezone.utc))


def _iso(moment: _dt.datetime) -> str:
    return moment.astimezone(_dt.timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def _file_time(path: Path) -> str:
    return _iso(_dt.datetime.fromtimestamp(path.stat().st_mtime, _dt.timezone.utc))


def stated_time(finished_at: str | None) -> str | None:
    """A record's `finished_at` where it is an ISO 8601 time (a result file is input like any other)."""
    try:
        return _iso(_dt.datetime.fromisoformat(finished_at.replace("Z", "+00:00"))) if finished_at else None
    except ValueError:
        return None


def content_hash(data: Any) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


HARNESS_ROOT = Path(__file__).resolve().parents[2]  # the checkout (or unpacked copy) holding compat/
ARCHIVE_STAMP = Path(__file__).resolve().parents[1] / "commit.txt"  # `git archive` writes the commit in (export-subst)


def _git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=10,
                          check=True).stdout.strip()


def harness_commit(root: Path = HARNESS_ROOT, stamp_file: Path = ARCHIVE_STAMP) -> str:
    """The commit of the harness's own source tree: `<sha>`, `<sha>+dirty` with uncommitted changes to
    tracked files; from a `git archive` copy `<sha> (archive: dirty unknown)`; else `unknown (why)`.

    Never an enclosing repository's: git is asked only where `root` is itself a work tree's top
    (a copy unpacked inside another repository, or an installed wheel inside a project, is not)."""
    try:
        top = Path(_git(root, "rev-parse", "--show-toplevel")).resolve()
    except (OSError, subprocess.SubprocessError):
        top = None
    if top == root.resolve():
        try:
            head = _git(root, "rev-parse", "HEAD")
            dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
        except (OSError, subprocess.SubprocessError) as exc:
            return f"unknown (git at {root}: {type(exc).__name__})"
        return head + ("+dirty" if dirty else "") if head else "unknown (no commit yet)"
    try:
        stamped = stamp_file.read_text().strip()
    except OSError:
        stamped = ""
    if len(stamped) == 40 and all(c in "0123456789abcdef" for c in stamped):
        return f"{stamped} (archive: dirty unknown)"
    where = f"inside the repository at {top}" if top else "not a git work tree"
    return f"unknown (the harness at {root} is {where}, with no archive stamp)"


def stamp(record: dict[str, Any]) -> dict[str, Any]:
    """The record with what the store keeps of a run it cannot tell later: the harness commit that
    ran it and when it finished (the runner calls this as a cell ends)."""
    record.setdefault("harness_commit", harness_commit())
    record["finished_at"] = now()
    return record


def document_hash(kind: str, name: str, data: Any) -> str:
    """What identifies a kept document: its kind, name and content."""
    return content_hash([kind, name, data])


@dataclass(frozen=True)
class Document:
    """One kept document (a Kimi record, a bisect or support table) and where it was read from."""
    kind: str
    name: str
    content_hash: str
    ran_at: str
    source: str
    data: Any


@dataclass(frozen=True)
class Run:
    """One stored run of a cell."""
    cell_id: str
    content_hash: str
    ran_at: str
    harness_commit: str
    machine: dict[str, Any]
    source: str
    record: CellRecord


@dataclass
class Imported:
    """What one import of a results folder did: cell runs added, cell runs already kept, files refused
    (why), and what the folder held: each cell id's run (by content hash) and each document (kind, name;
    its content by hash in `document_hashes`)."""
    added: int = 0
    known: int = 0
    problems: list[str] = field(default_factory=list)
    runs: dict[str, set[str]] = field(default_factory=dict)
    documents: set[tuple[str, str]] = field(default_factory=set)
    document_hashes: set[str] = field(default_factory=set)  # the content of each document it held

    def merge(self, other: "Imported") -> "Imported":
        self.added += other.added
        self.known += other.known
        self.problems += other.problems
        for cell_id, hashes in other.runs.items():
            self.runs.setdefault(cell_id, set()).update(hashes)
        self.documents |= other.documents
        self.document_hashes |= other.document_hashes
        return self


class StoreError(RuntimeError):
    """The store file cannot be opened or is not a store."""


class Store:
    def __init__(self, path: Path):
        self.path = Path(path)
        self._commit: str | None = None
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.db = sqlite3.connect(str(self.path), timeout=60)
            self.db.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise StoreError(f"results store {self.path}: {exc}; expected a writable SQLite file "
                             f"(--store PATH or ${STORE_ENV})") from exc

    @classmethod
    def open(cls, path: str | Path | None = None, results: Path = Path("results")) -> "Store":
        """The store at `path` (`user`: the per-user one), else $COMPAT_STORE, else the one beside
        `results` (the command's own results folder)."""
        return cls(store_path(path, results) if path is not None else default_store_path(results))

    def close(self) -> None:
        self.db.close()

    def _harness_commit(self) -> str:
        if self._commit is None:
            self._commit = harness_commit()
        return self._commit

    # ------------------------------------------------------------------ writing

    def add_run(self, record: CellRecord, ran_at: str | None = None, source: str = "run") -> bool:
        """Keep one cell run (its JSON, key for key as it was read); False when the same record is already kept
        (by content)."""
        data = to_json(record)
        digest = content_hash(data)
        with self.db:
            cursor = self.db.execute(
                "INSERT OR IGNORE INTO runs (cell_id, content_hash, ran_at, stored_at, harness_commit, machine, "
                "settings, source, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (record.id, digest, stated_time(record.finished_at) or ran_at or now(), now(),
                 record.harness_commit or f"unknown (stored by {self._harness_commit()})",
                 json.dumps(to_json(record.machine) or {}), json.dumps(to_json(record.settings) or {}),
                 source, json.dumps(data)))
        return cursor.rowcount == 1

    def add_document(self, kind: str, name: str, data: Any, ran_at: str | None = None, source: str = "run") -> bool:
        """Keep a Kimi record or a bisect table; False when the same content is already kept."""
        with self.db:
            cursor = self.db.execute(
                "INSERT OR IGNORE INTO documents (kind, name, content_hash, ran_at, source, data) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (kind, name, document_hash(kind, name, data), ran_at or now(), source, json.dumps(data)))
        return cursor.rowcount == 1

    def import_dir(self, folder: Path) -> Imported:
        """results/<cell>.json or <cell>.json.gz (validated as compat.shared.results.load_cell validates them),
        <folder>/kimi*.json, <folder>/bisect/speculators-*.json and <folder>/support/*.json. A file
        that cannot be read or fails the record
        schema is named in `problems` and the others are still kept. Two files of one folder with
        one cell id are both kept, the second as `<id>@<file>` (and named in `duplicates`)."""
        folder = Path(folder)
        out = Imported()
        if not folder.is_dir():
            out.problems.append(f"results directory {folder} does not exist")
            return out
        seen: dict[str, Path] = {}
        for path in record_files(folder):  # <cell>.json or <cell>.json.gz (published/results keeps them gzip'd)
            try:
                if path.name.startswith("kimi"):
                    name = record_stem(path)
                    data = read_json(path, "kimi result")
                    self.add_document(KIMI, name, data, _file_time(path), str(path))
                    out.documents.add((KIMI, name))
                    out.document_hashes.add(document_hash(KIMI, name, data))
                    continue
                cell = load_cell(path)
            except ResultFileError as exc:
                out.problems.append(str(exc))
                continue
            if cell.id in seen:  # built from its JSON, so that it writes back key for key (records.to_json)
                cell = build(CellRecord, dict(to_json(cell), id=f"{cell.id}@{path.name}",
                                              duplicate_of=str(seen[cell.id])))
            seen.setdefault(cell.id, path)
            added = self.add_run(cell, _file_time(path), str(path))
            out.runs.setdefault(cell.id, set()).add(content_hash(to_json(cell)))
            out.added += added
            out.known += not added
        # bisect tables, and compat.harness.support_run's rows and columns
        for kind, pattern, what in ((BISECT, "speculators-*.json", "bisect result"),
                                    (SUPPORT, "*.json", "support table")):
            for path in sorted((folder / kind).glob(pattern)):
                try:
                    data = read_json(path, what)
                except ResultFileError as exc:
                    out.problems.append(str(exc))
                    continue
                self.add_document(kind, path.stem, data, _file_time(path), str(path))
                out.documents.add((kind, path.stem))
                out.document_hashes.add(document_hash(kind, path.stem, data))
        return out

    # ------------------------------------------------------------------ reading

    def _runs(self, where: str = "", args: tuple[str, ...] = ()) -> Iterator[Run]:
        rows = self.db.execute(f"SELECT cell_id, content_hash, ran_at, harness_commit, machine, source, record "
                               f"FROM runs {where} ORDER BY cell_id, ran_at, seq", args)
        for cell_id, digest, ran_at, commit, machine, source, record in rows:
            try:  # a store kept by an older harness may hold an older schema: migrated as a file's is
                typed = load_record(json.loads(record), f" (run {cell_id} of the results store {self.path})")
            except RecordError as exc:
                raise StoreError(f"results store {self.path}: run {cell_id} ({source}): {exc}") from exc
            yield Run(cell_id, digest, ran_at, commit, json.loads(machine), source, typed)

    def runs(self, cell_id: str | None = None) -> list[Run]:
        """Every run (of one cell id), oldest first."""
        return list(self._runs("WHERE cell_id = ?", (cell_id,)) if cell_id is not None else self._runs())

    def history(self, chosen: dict[str, set[str]] | None = None) -> dict[str, list[Run]]:
        """Every cell id with its runs, oldest first (the newest last). With `chosen` (cell id -> the
        content hashes of the runs asked for, as `Imported.runs`), only those ids, each ending at the
        newest chosen run: a later run kept from elsewhere is not shown, earlier ones stay (flips)."""
        out: dict[str, list[Run]] = {}
        for run in self._runs():
            out.setdefault(run.cell_id, []).append(run)
        if chosen is None:
            return out
        trimmed = {}
        for cell_id, hashes in chosen.items():
            runs = out.get(cell_id) or []
            ends = [i for i, run in enumerate(runs) if run.content_hash in hashes]
            if ends:
                trimmed[cell_id] = runs[:ends[-1] + 1]
        return trimmed

    def newest(self) -> list[Run]:
        return [runs[-1] for runs in self.history().values()]

    def documents(self, kind: str, names: set[str] | None = None, hashes: set[str] | None = None) -> dict[str, Any]:
        """The newest content of each document of a kind (only `names`, and only the contents `hashes`,
        where given), by name, the most recent last."""
        return {name: kept.data for name, kept in self.kept_documents(kind, names, hashes).items()}

    def kept_documents(self, kind: str, names: set[str] | None = None,
                       hashes: set[str] | None = None) -> dict[str, Document]:
        """As `documents`, each with where it was read from. `hashes` (`Imported.document_hashes`): only
        the contents a folder held, so a report of that folder never shows a newer copy kept from
        elsewhere under the same name."""
        out: dict[str, Document] = {}
        rows = self.db.execute("SELECT name, content_hash, ran_at, source, data FROM documents WHERE kind = ? "
                               "ORDER BY ran_at, seq", (kind,))
        for name, digest, ran_at, source, data in rows:
            if (names is None or name in names) and (hashes is None or digest in hashes):
                out.pop(name, None)
                out[name] = Document(kind, name, digest, ran_at, source, json.loads(data))
        return out

    def export_dir(self, folder: Path) -> list[Path]:
        """The newest run of every cell as <cell-id>.json, the Kimi record, the bisect and support tables."""
        folder = Path(folder)
        paths = []
        for run in self.newest():
            path = folder / f"{run.cell_id}.json"
            write_json_atomic(path, to_json(run.record))
            paths.append(path)
        for name, data in self.documents(KIMI).items():
            write_json_atomic(folder / f"{name}.json", data)
            paths.append(folder / f"{name}.json")
        for kind in (BISECT, SUPPORT):
            for name, data in self.documents(kind).items():
                write_json_atomic(folder / kind / f"{name}.json", data)
                paths.append(folder / kind / f"{name}.json")
        return paths
